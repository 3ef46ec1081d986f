"""The two components of the portability pipeline: ``produce`` publishes, ``consume`` reads.

``consume`` gets ``produce``'s published output as its argument (each adapter passes it its
own way) and publishes ``shout``; the pipeline passes when ``shout`` is ``PORTABLE!``.
Both run the Python of this environment (``kubernetes`` runs its containers here as host
processes; see ``tests/e2e/infra/kubelet_exec.py``). A column that runs real containers sets
``MATRIX_IMAGE`` (the image), ``MATRIX_PYTHON`` (its Python) and ``MATRIX_MOUNT`` (a directory
bind-mounted at the same path, holding the outputs root) in the environment.
"""

from __future__ import annotations

import os
import sys

from tether.specs import AppDef, BindMount, Role

TEXT = "portable"
EXPECTED = "PORTABLE!"

_PRODUCE = """
import sys
from tether.tracker import AppRun
message = sys.argv[1].upper()
print("produce:", message, flush=True)
AppRun.run_from_env().add_output("message", message)
"""

_CONSUME = """
import sys
from tether.tracker import AppRun
shout = sys.argv[1] + "!"
print("consume:", shout, flush=True)
AppRun.run_from_env().add_output("shout", shout)
"""


def _role(name: str, image: str, code: str, arg: str) -> Role:
    mount = os.environ.get("MATRIX_MOUNT")
    return Role(name, image=os.environ.get("MATRIX_IMAGE", image),
                entrypoint=os.environ.get("MATRIX_PYTHON", sys.executable),
                args=["-c", code, arg],
                mounts=[BindMount(src_path=mount, dst_path=mount)] if mount else [])


def produce(text: str = TEXT, image: str = "tether-matrix/python:1") -> AppDef:
    """Publishes ``message``: the text in capitals.

    Args:
        text: The text.
        image: The image (ignored by backends that run on this host; ``$MATRIX_IMAGE`` wins).

    Returns:
        The AppDef.
    """
    return AppDef("produce", [_role("produce", image, _PRODUCE, text)])


def consume(message: str, image: str = "tether-matrix/python:1") -> AppDef:
    """Publishes ``shout``: the message of ``produce`` with an exclamation mark.

    Args:
        message: ``produce``'s output.
        image: The image (ignored by backends that run on this host; ``$MATRIX_IMAGE`` wins).

    Returns:
        The AppDef.
    """
    return AppDef("consume", [_role("consume", image, _CONSUME, message)])
