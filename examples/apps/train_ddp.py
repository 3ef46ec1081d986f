"""A tiny distributed training app: PyTorch DDP on CPU with the gloo backend.

It fits a small linear model to synthetic data (y = X @ w_true + noise) for a few seconds.
Each rank trains on its own shard; DDP averages the gradients, so every rank ends with the
same weights, which the app checks before it exits. Rank 0 reports each epoch's loss and an
ETA through ``tether.runtime.report`` (``tether status`` and the orchestrators show it).

Run it as a distributed job through tether (two workers on this machine)::

    tether run -s local_cwd dist.ddp -j 1x2 --script examples/apps/train_ddp.py

or directly with torchrun::

    python -m torch.distributed.run --nproc_per_node 2 examples/apps/train_ddp.py

When the job has a checkpoint location (``AppDef.checkpoint``, seen as
``$TETHER_CHECKPOINT``: a path every rank sees, or an fsspec URL), rank 0 saves the model
and the epoch there after each epoch, and every rank resumes from it when it starts: an
attempt that tether's recovery policy submits again after a preemption goes on from the
last finished epoch, and ends with the same weights and loss as a run that was never
interrupted (see ``docs/recovery.md``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

# torch warns when numpy is missing; this app does not need numpy
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from tether.runtime import (  # noqa: E402
    is_rank0,
    local_device,
    local_rank,
    process_group,
    rank,
    report,
    world_size,
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options of the app.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The options.
    """
    parser = argparse.ArgumentParser(description="tiny DDP training on synthetic data")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=2048, help="samples per rank")
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-dir", default=None,
                        help="rank 0 saves model.pt (the Linear state_dict) here")
    return parser.parse_args(argv)


def synthetic_shard(
    samples: int, features: int, seed: int, shard: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """This rank's shard of a synthetic regression problem.

    Args:
        samples: Samples in the shard.
        features: Input features.
        seed: Seed of the true weights (the same on every rank).
        shard: Index of the shard (different data per rank).

    Returns:
        Inputs, targets and the true weights.
    """
    w_true = torch.randn(features, 1, generator=torch.Generator().manual_seed(seed))
    gen = torch.Generator().manual_seed(seed + 1 + shard)
    x = torch.randn(samples, features, generator=gen)
    y = x @ w_true + 0.01 * torch.randn(samples, 1, generator=gen)
    return x, y, w_true


def sgd_step(params: Iterable[torch.nn.Parameter], lr: float) -> None:
    """Plain gradient descent (torch.optim would add seconds of imports to this tiny app).

    Args:
        params: The parameters, with gradients.
        lr: The learning rate.
    """
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p -= lr * p.grad


CHECKPOINT_FILE = "train_ddp.pt"


def _where(location: str) -> tuple[Any, str]:
    """The filesystem and file of the checkpoint: fsspec's for a URL, None for a path."""
    if "://" in location and not location.startswith("file://"):
        import fsspec  # only for a URL checkpoint location

        fs, root = fsspec.core.url_to_fs(location)
        return fs, f"{root.rstrip('/')}/{CHECKPOINT_FILE}"
    return None, os.path.join(location.removeprefix("file://"), CHECKPOINT_FILE)


def save_checkpoint(location: str, model: torch.nn.Module, epoch: int, loss: float) -> None:
    """Saves the model after ``epoch`` (rank 0). A path gets a whole file or none (written
    aside, synced, renamed: a rank killed mid-write leaves the previous checkpoint); an
    object store writes an object whole.

    Args:
        location: ``$TETHER_CHECKPOINT``.
        model: The model (not the DDP wrapper).
        epoch: The epoch just finished.
        loss: Its last loss.
    """
    state = {"epoch": epoch, "loss": loss, "model": model.state_dict()}
    fs, path = _where(location)
    if fs is not None:
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(path, "wb") as f:
            torch.save(state, f)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(location: str | None) -> dict[str, Any] | None:
    """The last checkpoint saved under ``location``, if any.

    Args:
        location: ``$TETHER_CHECKPOINT`` (None: no checkpointing).

    Returns:
        ``epoch``, ``loss`` and ``model`` (a state_dict), or None.
    """
    if not location:
        return None
    fs, path = _where(location)
    if not (fs.exists(path) if fs is not None else os.path.exists(path)):
        return None
    with fs.open(path, "rb") if fs is not None else open(path, "rb") as f:
        state: dict[str, Any] = torch.load(f, weights_only=True)
    return state


def publish(model_dir: str | None, model: torch.nn.Module, final_loss: float) -> None:
    """Saves the model (when asked) and publishes the job's outputs (rank 0 only).

    Args:
        model_dir: Where to save ``model.pt``; nothing is saved when None.
        model: The trained model.
        final_loss: The last training loss.
    """
    from tether.tracker import AppRun

    run = AppRun.run_from_env()
    if model_dir:
        os.makedirs(model_dir, exist_ok=True)
        path = os.path.join(model_dir, "model.pt")
        torch.save(model.state_dict(), path)
        print(f"saved {path}", flush=True)
    if run.outputs_url:
        run.add_output("final_loss", final_loss)
        if model_dir:
            run.add_output("model_dir", model_dir)


def main(
    argv: Sequence[str] | None = None, after_epoch: Callable[[int], None] | None = None
) -> int:
    """Trains and reports.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).
        after_epoch: Called on every rank after each epoch, once its checkpoint is saved.

    Returns:
        The exit code.
    """
    args = parse_args(argv)
    ckpt = os.environ.get("TETHER_CHECKPOINT") or None
    # every rank waits for the others before the group is torn down (see process_group)
    with process_group(backend="gloo"):
        device = local_device()
        me, n = rank(), world_size()
        print(f"rank {me}/{n} (local rank {local_rank()}) training on {device}", flush=True)

        torch.manual_seed(args.seed)  # same initial weights everywhere (DDP also broadcasts)
        linear = torch.nn.Linear(args.features, 1)
        loss = torch.tensor(0.0)
        first = 0
        resumed = load_checkpoint(ckpt)
        if resumed is not None:  # an earlier attempt's last finished epoch
            linear.load_state_dict(resumed["model"])
            first, loss = resumed["epoch"] + 1, torch.tensor(resumed["loss"])
            print(f"rank {me}: resuming after epoch {resumed['epoch']}", flush=True)
        model = DistributedDataParallel(linear.to(device))
        x, y, w_true = synthetic_shard(args.samples, args.features, args.seed, me)
        start = time.monotonic()
        for epoch in range(first, args.epochs):
            perm = torch.randperm(args.samples, generator=torch.Generator().manual_seed(epoch))
            for i in range(0, args.samples, args.batch_size):
                idx = perm[i:i + args.batch_size]
                model.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x[idx].to(device)), y[idx].to(device))
                loss.backward()  # DDP averages the gradients of all ranks here
                sgd_step(model.parameters(), args.lr)
            avg = loss.detach().clone()
            dist.all_reduce(avg)
            if is_rank0():
                print(f"epoch {epoch}: loss {avg.item() / n:.5f}", flush=True)
                if ckpt:
                    save_checkpoint(ckpt, model.module, epoch, loss.item())
            # the orchestrator shows it live (tether status, task log, Prefect artifact...);
            # rank 0 writes it, with an ETA from the rate of epochs so far
            report(step=epoch + 1, total=args.epochs, epoch=epoch, loss=avg.item() / n)
            dist.barrier()  # the checkpoint is whole before any rank goes on
            if after_epoch is not None:
                after_epoch(epoch)

        weights = model.module.weight.detach().clone()
        reference = weights.clone()
        dist.broadcast(reference, src=0)
        if not torch.allclose(weights, reference):
            print(f"rank {me}: weights differ from rank 0", file=sys.stderr, flush=True)
            return 1
        err = (weights.t().cpu() - w_true).abs().max().item()
        print(f"rank {me}: done in {time.monotonic() - start:.1f}s, final loss "
              f"{loss.item():.5f}, max weight error {err:.4f}", flush=True)
        if is_rank0():
            publish(args.model_dir, model.module, loss.item())
        return 0


if __name__ == "__main__":
    sys.exit(main())
