"""tether's own exception types for invalid specs and inputs.

Every check of user input raises one of these, never a bare ``TypeError``/``ValueError``
from deep inside, so callers can catch ``SpecError`` (or plain ``ValueError``) and show the
message: it names the field, the value and what is allowed.
"""

from __future__ import annotations


class SpecError(ValueError):
    """An invalid value in an app spec, run option or command-line input."""


class SpecTypeError(SpecError, TypeError):
    """A value of the wrong type (also a :class:`SpecError`, hence a ``ValueError``)."""
