"""Components with a recovery policy (the orchestrator tests).

``local_cwd`` has no infrastructure to lose, so its policy recovers from the
``application`` cause: the first attempt exits 3 as a lost node's replica would, and the
loop that recovers it is the one an infrastructure cause goes through. Each attempt appends
its number to ``<checkpoint>/attempts``, so a test sees which attempts ran. ``lost`` is for
a real infrastructure failure (``tests/adapters/slurm_faults.py``): its first attempt
runs until its node is lost; ``evictable`` is the same on Kubernetes
(``tests/adapters/kube_faults.py``): its first attempt's pod runs until evicted.
"""

from __future__ import annotations

import sys

from tether.specs import AppDef, RecoveryPolicy, Role

_REPLICA = """
import os, pathlib, sys
ckpt = pathlib.Path(os.environ["TETHER_CHECKPOINT"])
ckpt.mkdir(parents=True, exist_ok=True)
attempt = int(os.environ["TETHER_ATTEMPT"])
with open(ckpt / "attempts", "a") as f:
    f.write(f"{attempt}\\n")
print(f"training, attempt {attempt}", flush=True)
sys.exit(3 if attempt == 0 else 0)
"""


def flaky(ckpt: str) -> AppDef:
    """Fails its first attempt; recovered once.

    Args:
        ckpt: The checkpoint location.

    Returns:
        The AppDef.
    """
    role = Role("train", image="", entrypoint=sys.executable, args=["-c", _REPLICA])
    return AppDef("flaky", roles=[role], checkpoint=ckpt,
                  recovery=RecoveryPolicy(on=["application"], max_recoveries=2, backoff_s=0))


def placed(message: str = "placed") -> AppDef:
    """One replica that prints its attempt (the failover tests: no recovery policy; its image
    is for kubernetes, local_cwd ignores it).

    Args:
        message: What it prints before the attempt number.

    Returns:
        The AppDef.
    """
    code = (f"import os; print({message!r}, 'attempt', os.environ.get('TETHER_ATTEMPT', '0'),"
            " flush=True)")
    role = Role("worker", image="busybox:1.36", entrypoint=sys.executable, args=["-c", code])
    return AppDef("placed", roles=[role])


_LOST = """\
set -eu
echo "attempt $TETHER_ATTEMPT"
if [ "$TETHER_ATTEMPT" = 0 ]; then
  mkdir -p "$TETHER_CHECKPOINT"
  echo 5 > "$TETHER_CHECKPOINT/step.tmp"
  mv "$TETHER_CHECKPOINT/step.tmp" "$TETHER_CHECKPOINT/step"
  exec sleep 600
fi
echo "resumed at step $(cat "$TETHER_CHECKPOINT/step")"
"""


def lost(ckpt: str, name: str = "lost") -> AppDef:
    """Saves a checkpoint on attempt 0 and runs until the infrastructure fails under it; a
    later attempt resumes from the checkpoint and ends (the infrastructure tests: the
    default policy recovers infrastructure causes only, never an application exit).

    Args:
        ckpt: The checkpoint location.
        name: The app's name (the backend's job name, so a test finds its own jobs).

    Returns:
        The AppDef.
    """
    role = Role("train", image="", entrypoint="bash", args=["-c", _LOST])
    return AppDef(name, roles=[role], checkpoint=ckpt,
                  recovery=RecoveryPolicy(max_recoveries=2, backoff_s=0))


def evictable(ckpt: str, name: str = "evictable") -> AppDef:
    """One pod that runs until evicted (the Kubernetes recovery tests: the test kubelet of
    ``tests/adapters/kube_faults.py`` decides what each attempt's pod does, and prints its
    lines); recovered from infrastructure causes only.

    Args:
        ckpt: The checkpoint location.
        name: The app's name.

    Returns:
        The AppDef.
    """
    role = Role("train", image="busybox:1.36", entrypoint="sleep", args=["600"])
    return AppDef(name, roles=[role], checkpoint=ckpt,
                  recovery=RecoveryPolicy(max_recoveries=2, backoff_s=0))
