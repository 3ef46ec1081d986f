"""Reading Google-style docstrings: the summary, the description and each parameter's help.

Components document their parameters the Google way (an ``Args:`` section). This reader
covers that form in plain string operations; ``docstring_parser`` (and its import, about 4%
of a local dryrun) is used only for a docstring it does not recognise, so the result is the
same either way.
"""

from __future__ import annotations

import inspect

SECTIONS = frozenset({
    "Arguments", "Args", "Parameters", "Params", "Raises", "Exceptions", "Except",
    "Attributes", "Example", "Examples", "Returns", "Yields",
})
"""Section titles (a title alone on its line, flush left, followed by ``:``)."""
PARAM_SECTIONS = frozenset({"Arguments", "Args", "Parameters", "Params"})


def _title(line: str) -> str | None:
    head = line.rstrip(" \t\r\f\v")
    if head.endswith(":") and head[:-1] in SECTIONS:
        return head[:-1]
    return None


def parse_google(doc: str) -> tuple[str, str, dict[str, str]] | None:
    """Reads a cleaned docstring (``inspect.getdoc``) written in the Google style.

    Args:
        doc: The docstring (its indentation is removed here, as ``inspect.getdoc`` does).

    Returns:
        ``(short description, long description, {parameter: help})`` with each help's
        whitespace collapsed, or None when the docstring has a shape this reader does not
        decide (the caller then uses ``docstring_parser``).
    """
    doc = inspect.cleandoc(doc)
    if not doc:
        return "", "", {}
    lines = doc.split("\n")
    titles = [(i, t) for i, line in enumerate(lines) if (t := _title(line)) is not None]
    end = titles[0][0] if titles else len(lines)
    short = lines[0] if end > 0 else ""
    long = "\n".join(lines[1:end]).strip()
    sections: dict[str, list[str]] = {}
    for k, (i, title) in enumerate(titles):
        stop = titles[k + 1][0] if k + 1 < len(titles) else len(lines)
        body = lines[i + 1:stop]
        for j, line in enumerate(body):  # a flush-left line ends the section
            if line[:1].strip():
                body = body[:j]
                break
        sections[title] = body  # a repeated title: the last one counts
    helps: dict[str, str] = {}
    for title, body in sections.items():
        if title not in PARAM_SECTIONS:
            continue
        entries = _entries(body)
        if entries is None:
            return None
        for head, rest in entries:
            before, colon, after = head.partition(":")
            if not colon:
                return None
            name = before.strip()
            if "(" in name:
                if not name.endswith(")"):
                    return None
                name = name.split("(", 1)[0].strip()
            if not name:
                return None
            key = name.lstrip("*").split(" ")[0]
            helps[key] = " ".join(" ".join([after, *rest]).split())
    return short, long, helps


def _entries(body: list[str]) -> list[tuple[str, list[str]]] | None:
    """Splits a section's lines into entries: a line at the entry indent starts one."""
    filled = [line for line in body if line.strip()]
    if not filled:
        return []
    first = filled[0]
    indent = first[: len(first) - len(first.lstrip())]
    if not indent:
        return None
    entries: list[tuple[str, list[str]]] = []
    for line in body:
        if not line.strip():
            if entries:
                entries[-1][1].append("")
            continue
        if not line.startswith(indent):
            return None  # less indented than the first entry: not a shape decided here
        if line[len(indent)].isspace():
            entries[-1][1].append(line.strip())  # a continuation (entries is not empty)
        else:
            entries.append((line[len(indent):], []))
    return entries
