"""Components of the KFP adapter tests (importable by launcher steps: ``tests.adapters.kfp...``).

Defaults are fixed strings so that compiled pipelines (the golden files) do not depend on the
environment.
"""

from __future__ import annotations

import sys
from typing import Annotated

from kfp.dsl import Dataset, Input, Model, Output

from tether.specs import AppDef, Role, VolumeMount, macros, parse_mounts, resource

IMAGE = "registry.example.com/team/trainer:1.0"


def hello(msg: str = "hello", image: str = "localhost/bb:latest") -> AppDef:
    """Prints a message with the image's ``echo``.

    Args:
        msg: The message.
        image: The image.

    Returns:
        The AppDef.
    """
    return AppDef("hello", [Role("hello", image=image, entrypoint="echo", args=[msg])])


def shout(msg: str, times: int = 2, image: str = "localhost/bb:latest") -> AppDef:
    """Prints a message several times with ``sh -c`` (the message is a positional argument).

    Args:
        msg: The message.
        times: How many times.
        image: The image.

    Returns:
        The AppDef.
    """
    script = f'for i in $(seq {int(times)}); do echo "$0 #$i (app ${{APP}})"; done'
    return AppDef("shout", [Role(
        "shout", image=image, entrypoint="sh",
        args=["-c", script, msg],
        env={"APP": "kfp"},
    )])


def tagged(msg: str, image: str = "localhost/bb:latest") -> AppDef:
    """Prints the message, the app id and the replica id (macros).

    Args:
        msg: The message.
        image: The image.

    Returns:
        The AppDef.
    """
    return AppDef("tagged", [Role(
        "tagged", image=image, entrypoint="echo",
        args=[f"msg={msg}", f"app={macros.app_id}", f"replica={macros.replica_id}"],
    )])


def splice(msg: str, image: str = "localhost/bb:latest") -> AppDef:
    """Splices the message into a shell script (unsafe for pipeline values in native steps).

    Args:
        msg: The message.
        image: The image.

    Returns:
        The AppDef.
    """
    return AppDef("splice", [Role("splice", image=image, entrypoint="sh",
                                  args=["-c", f"echo '{msg}'"])])


def trainer(
    lr: str = "0.1",
    epochs: int = 3,
    gpu: int = 2,
    h: str | None = None,
    data_pvc: str = "datasets",
    image: str = IMAGE,
    max_retries: int = 2,
) -> AppDef:
    """A single-node trainer with GPUs, env, retries and a volume mount.

    Args:
        lr: Learning rate.
        epochs: Epochs.
        gpu: GPUs.
        h: A named resource (its instance type becomes a node selector).
        data_pvc: The PVC holding the data.
        image: The image.
        max_retries: Retries.

    Returns:
        The AppDef.
    """
    res = resource(cpu=8, gpu=gpu, memMB=32768, h=h)
    return AppDef("trainer", [Role(
        "trainer", image=image, entrypoint="python",
        args=["-m", "trainer.main", "--lr", lr, "--epochs", str(epochs),
              "--run-id", macros.app_id, "--rank", macros.replica_id],
        env={"LOGLEVEL": "INFO", "DATA_DIR": "/data"},
        resource=res,
        max_retries=max_retries,
        mounts=[VolumeMount(src=data_pvc, dst_path="/data")],
    )])


def pair(msg: str = "hi", image: str = IMAGE) -> AppDef:
    """Two roles: a server and a client (a launcher step).

    Args:
        msg: The message.
        image: The image.

    Returns:
        The AppDef.
    """
    return AppDef("pair", [
        Role("server", image=image, entrypoint="echo", args=["server", msg]),
        Role("client", image=image, entrypoint="echo", args=["client", msg], num_replicas=2),
    ])


def bound(image: str = IMAGE, mounts: list[str] | None = None) -> AppDef:
    """A role with mounts given on the command line.

    Args:
        image: The image.
        mounts: Mounts.

    Returns:
        The AppDef.
    """
    return AppDef("bound", [Role("bound", image=image, entrypoint="true",
                                 mounts=parse_mounts(mounts) if mounts else [])])


_PUBLISH = """
import sys
from tether.tracker import AppRun
msg, times = sys.argv[1], int(sys.argv[2])
for i in range(times):
    print(f"line {i}: {msg}", flush=True)
run = AppRun.run_from_env()
run.add_output("message", msg.upper())
run.add_output("length", len(msg))
run.add_output("ratio", len(msg) / 2)
"""


def publish(msg: str, times: int = 2, fail: bool = False) -> AppDef:
    """A local job that prints, then publishes outputs (``message``, ``length``, ``ratio``).

    Args:
        msg: The message.
        times: How many lines to print.
        fail: Exit 3 after publishing.

    Returns:
        The AppDef.
    """
    code = _PUBLISH + ("\nsys.exit(3)\n" if fail else "")
    return AppDef("publish", [Role("publish", image="", entrypoint=sys.executable,
                                   args=["-c", code, msg, str(times)])])


def workers(msg: str, n: int = 2) -> AppDef:
    """Several replicas print the message with their replica id (a launcher step).

    Args:
        msg: The message.
        n: Replicas.

    Returns:
        The AppDef.
    """
    code = "import sys; print(sys.argv[1], 'from replica', sys.argv[2], flush=True)"
    return AppDef("workers", [Role("worker", image="", entrypoint=sys.executable,
                                   args=["-c", code, msg, macros.replica_id], num_replicas=n)])


def sleeper(seconds: int = 60) -> AppDef:
    """A job that sleeps (to terminate a step while it runs).

    Args:
        seconds: How long.

    Returns:
        The AppDef.
    """
    code = "import sys, time; print('sleeping', flush=True); time.sleep(int(sys.argv[1]))"
    return AppDef("sleeper", [Role("sleeper", image="", entrypoint=sys.executable,
                                   args=["-c", code, str(seconds)])])


def fit(lr: float, epochs: int = 3, fp16: bool = False, tag: str = "run", gpu: int = 1,
        image: str = IMAGE) -> AppDef:
    """A trainer with typed parameters that go into its command line.

    Args:
        lr: Learning rate.
        epochs: Epochs.
        fp16: Mixed precision.
        tag: A label.
        gpu: GPUs.
        image: The image.

    Returns:
        The AppDef.
    """
    return AppDef("fit", [Role(
        "fit", image=image, entrypoint="python",
        args=["-m", "trainer.fit", f"--lr={lr}", "--epochs", str(epochs),
              "--fp16", str(fp16).lower(), "--tag", tag],
        resource=resource(cpu=4, gpu=gpu, memMB=16384),
        max_retries=3,
    )])


def echo_typed(epochs: int, ratio: float, flag: bool, msg: str,
               image: str = "localhost/bb:latest") -> AppDef:
    """Echoes typed values (for container runs).

    Args:
        epochs: An int.
        ratio: A float.
        flag: A bool.
        msg: A str.
        image: The image.

    Returns:
        The AppDef.
    """
    return AppDef("echo-typed", [Role(
        "echo", image=image, entrypoint="echo",
        args=[f"epochs={epochs}", f"ratio={ratio}", f"flag={flag}", f"msg={msg}"],
    )])


def scaled(epochs: int = 3, image: str = IMAGE) -> AppDef:
    """Computes an argument from a parameter (twice the epochs): a launcher step for pipeline
    values.

    Args:
        epochs: Epochs.
        image: The image.

    Returns:
        The AppDef.
    """
    return AppDef("scaled", [Role("scaled", image=image, entrypoint="echo",
                                  args=[str(epochs * 2)])])


_REPORT = """
import os, sys
from tether.tracker import AppRun
name = sys.argv[1]
print(f"{name}={os.environ.get(name, '<unset>')}", flush=True)
AppRun.run_from_env().add_output("seen", os.environ.get(name, ""))
"""


def report(name: str = "TEAM") -> AppDef:
    """A local job that prints one env variable and publishes it as the output ``seen``.

    Args:
        name: The variable.

    Returns:
        The AppDef.
    """
    return AppDef("report", [Role("report", image="", entrypoint=sys.executable,
                                  args=["-c", _REPORT, name])])


_WRITE_ROWS = """
import os, sys
path, rows = sys.argv[1], int(sys.argv[2])
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
with open(path, "w") as f:
    f.writelines(f"row {i}\\n" for i in range(rows))
print(f"wrote {rows} rows", flush=True)
"""

_COUNT_ROWS = """
import os, sys
from tether.tracker import AppRun
data, model = sys.argv[1], sys.argv[2]
with open(data) as f:
    n = sum(1 for _ in f)
os.makedirs(os.path.dirname(model) or ".", exist_ok=True)
with open(model, "w") as f:
    f.write(f"rows={n}\\n")
print(f"counted {n} rows", flush=True)
AppRun.run_from_env().add_output("rows", n)
"""


def write_rows(data: Annotated[str, Output[Dataset]], rows: int = 3) -> AppDef:
    """A local job that writes a data set (an output artifact).

    Args:
        data: Where to write it.
        rows: How many rows.

    Returns:
        The AppDef.
    """
    return AppDef("write-rows", [Role("write", image="", entrypoint=sys.executable,
                                      args=["-c", _WRITE_ROWS, data, str(rows)])])


def count_rows(data: Annotated[str, Input[Dataset]],
               model: Annotated[str, Output[Model]]) -> AppDef:
    """A local job that reads a data set and writes a model (input and output artifacts).

    Args:
        data: The data set.
        model: Where to write the model.

    Returns:
        The AppDef.
    """
    return AppDef("count-rows", [Role("count", image="", entrypoint=sys.executable,
                                      args=["-c", _COUNT_ROWS, data, model])])


def seq_rows(data: Annotated[str, Output[Dataset]], rows: int = 3,
             image: str = "localhost/bb:latest") -> AppDef:
    """Writes ``rows`` lines to a data set with the image's ``seq`` (a native step).

    Args:
        data: Where to write it.
        rows: How many rows.
        image: The image.

    Returns:
        The AppDef.
    """
    return AppDef("seq-rows", [Role("seq", image=image, entrypoint="sh",
                                    args=["-c", 'mkdir -p "$(dirname "$0")" && seq "$1" > "$0"',
                                          data, str(rows)])])


def wc_rows(data: Annotated[str, Input[Dataset]], image: str = "localhost/bb:latest") -> AppDef:
    """Counts the lines of a data set with the image's ``wc`` (a native step).

    Args:
        data: The data set.
        image: The image.

    Returns:
        The AppDef.
    """
    return AppDef("wc-rows", [Role("wc", image=image, entrypoint="sh",
                                   args=["-c", 'echo "rows: $(wc -l < "$0")"', data])])
