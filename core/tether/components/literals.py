"""The text forms of list and dict component arguments, read as TorchX reads them.

* A list is ``a,b,c``: split on ``,``, each item stripped, empty items kept (``a,,b`` has
  three items); an empty text is an empty list.
* A dict is ``K=V`` pairs: ``A=1,B=2`` or ``A=1;B=2``. A piece after a ``,`` or ``;`` that
  has no ``=`` continues the previous value with its delimiter (``HOSTS=a,b,PORT=1`` is
  ``{"HOSTS": "a,b", "PORT": "1"}``), so a value may be a list literal. Keys and values are
  stripped. A value wholly in single or double quotes is taken literally, quotes removed:
  ``,``, ``;`` and ``=`` inside quotes separate nothing (``MSG="a, b"``; ``''`` is an empty
  value). A value may also contain ``=`` after its first one (``TOKEN=abc==``).
* A list inside a dict value (a ``dict[str, list[str]]`` parameter) is split on ``,`` and
  ``;`` outside quotes: ``--m worker=1;2,ps=3`` is ``{"worker": ["1", "2"], "ps": ["3"]}``.
"""

from __future__ import annotations

_DELIMS = ",;"
_QUOTES = "'\""


def _quoted_end(text: str, i: int) -> int:
    """The index of the quote closing the one at ``i`` (``-1`` when unclosed)."""
    quote = text[i]
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == quote:
            return j
        j += 1
    return -1


def _split_outside_quotes(text: str, delims: str) -> list[tuple[str, str]]:
    """``text`` cut at each of ``delims`` outside quotes: ``(piece, delimiter before it)``."""
    pieces: list[tuple[str, str]] = []
    start, before, i = 0, "", 0
    while i < len(text):
        ch = text[i]
        if ch in _QUOTES:
            end = _quoted_end(text, i)
            if end != -1:
                i = end + 1
                continue
        if ch in delims:
            pieces.append((text[start:i], before))
            start, before = i + 1, ch
        i += 1
    pieces.append((text[start:], before))
    return pieces


def _equals_outside_quotes(text: str) -> int:
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in _QUOTES:
            end = _quoted_end(text, i)
            if end != -1:
                i = end + 1
                continue
        if ch == "=":
            return i
        i += 1
    return -1


def unquote(text: str) -> str:
    """``text`` stripped, without the quotes when one pair of them wraps all of it.

    Args:
        text: A value.

    Returns:
        The value.
    """
    text = text.strip()
    if len(text) >= 2 and text[0] in _QUOTES and text[-1] == text[0]:
        return text[1:-1]
    return text


def parse_list(text: str) -> list[str]:
    """A list argument's items (TorchX's ``to_list``).

    Args:
        text: ``a,b,c``.

    Returns:
        The stripped items; ``[]`` for an empty or blank text.
    """
    if not text.strip():
        return []
    return [item.strip() for item in text.split(",")]


def parse_value_list(text: str) -> list[str]:
    """A list literal inside a dict value: split on ``,`` and ``;`` outside quotes.

    Args:
        text: ``1;2`` or ``a,"b,c"``.

    Returns:
        The items, each stripped and unquoted; ``[]`` for a blank text.
    """
    if not text.strip():
        return []
    return [unquote(piece) for piece, _ in _split_outside_quotes(text, _DELIMS)]


def parse_dict(text: str, *, keep_quotes: bool = False) -> dict[str, str]:
    """A dict argument's pairs (TorchX's ``to_dict``), values still text.

    Args:
        text: ``A=1,B=2`` (or ``;``-separated; see the module docstring).
        keep_quotes: Keep the quotes of quoted values (stripped only), for a value that is
            split further (:func:`parse_value_list`).

    Returns:
        Key to value text, in order; ``{}`` for a blank text.

    Raises:
        ValueError: When the text does not start with ``KEY=`` or a key is empty.
    """
    raw: dict[str, str] = {}
    last: str | None = None
    if not text.strip():
        return {}
    for piece, delim in _split_outside_quotes(text, _DELIMS):
        eq = _equals_outside_quotes(piece)
        if eq == -1:
            if last is None:
                raise ValueError(f"expects K=V pairs separated by ',' or ';', got {text!r}")
            raw[last] = f"{raw[last]}{delim}{piece}"
            continue
        last = unquote(piece[:eq])
        if not last:
            raise ValueError(f"has an empty key in {text!r}")
        raw[last] = piece[eq + 1:]
    if keep_quotes:
        return {key: value.strip() for key, value in raw.items()}
    return {key: unquote(value) for key, value in raw.items()}
