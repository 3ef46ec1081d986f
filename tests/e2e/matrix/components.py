"""The two components of the portability pipeline: ``produce`` publishes, ``consume`` reads.

``consume`` gets ``produce``'s published output as its argument (each adapter passes it its
own way) and publishes ``shout``; the pipeline passes when ``shout`` is ``PORTABLE!``.
Both run the Python of this environment (backends that run containers here run them as
host processes; see ``tests/e2e/infra/kubelet_exec.py``).
"""

from __future__ import annotations

import sys

from tether.specs import AppDef, Role

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


def produce(text: str = TEXT, image: str = "tether-matrix/python:1") -> AppDef:
    """Publishes ``message``: the text in capitals.

    Args:
        text: The text.
        image: The image (ignored by backends that run on this host).

    Returns:
        The AppDef.
    """
    role = Role("produce", image=image, entrypoint=sys.executable, args=["-c", _PRODUCE, text])
    return AppDef("produce", [role])


def consume(message: str, image: str = "tether-matrix/python:1") -> AppDef:
    """Publishes ``shout``: the message of ``produce`` with an exclamation mark.

    Args:
        message: ``produce``'s output.
        image: The image (ignored by backends that run on this host).

    Returns:
        The AppDef.
    """
    role = Role("consume", image=image, entrypoint=sys.executable, args=["-c", _CONSUME, message])
    return AppDef("consume", [role])
