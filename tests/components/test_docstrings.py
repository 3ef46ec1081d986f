"""The plain Google-style docstring reader agrees with ``docstring_parser`` wherever it decides."""

from __future__ import annotations

import inspect

import docstring_parser
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.components._docstrings import parse_google
from tether.components.finder import get_components


def _reference(doc: str) -> tuple[str, str, dict[str, str]] | None:
    try:
        d = docstring_parser.parse(doc, docstring_parser.DocstringStyle.GOOGLE)
    except docstring_parser.ParseError:
        return None
    helps = {p.arg_name.lstrip("*").split(" ")[0]: " ".join((p.description or "").split())
             for p in d.params}
    return d.short_description or "", d.long_description or "", helps


def test_every_builtin_component_reads_the_same_as_with_docstring_parser() -> None:
    comps = get_components()
    assert len(comps) > 5
    for name, info in comps.items():
        doc = inspect.getdoc(info.fn) or ""
        ours = parse_google(doc)
        assert ours is not None, f"{name}: the builtin's docstring is not read by the fast path"
        assert ours == _reference(doc), name


WORD = st.text(alphabet="abcdefgh xyz.,`", min_size=1, max_size=12).filter(lambda s: s.strip())
NAME = st.from_regex(r"\*{0,2}[a-z][a-z_0-9]{0,8}", fullmatch=True)


@st.composite
def google_docstrings(draw: st.DrawFn) -> str:
    lines = [draw(WORD).strip()]
    if draw(st.booleans()):
        lines += ["", *draw(st.lists(WORD.map(str.strip), max_size=3))]
    for title in draw(st.lists(st.sampled_from(["Args", "Returns", "Raises", "Example"]),
                               max_size=3)):
        lines += ["", f"{title}:"]
        indent = " " * draw(st.integers(1, 6))
        for _ in range(draw(st.integers(1, 3))):
            typed = f" ({draw(NAME).lstrip('*')})" if draw(st.booleans()) else ""
            lines.append(f"{indent}{draw(NAME)}{typed}: {draw(WORD).strip()}")
            for _ in range(draw(st.integers(0, 2))):
                lines.append(f"{indent}{' ' * draw(st.integers(1, 4))}{draw(WORD).strip()}")
    return "\n".join(lines)


@settings(max_examples=300, deadline=None)
@given(google_docstrings())
def test_generated_google_docstrings_read_the_same(doc: str) -> None:
    ours = parse_google(doc)
    if ours is not None:
        assert ours == _reference(doc)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab :\n ()*Args", max_size=80))
def test_any_text_is_either_read_the_same_or_left_to_docstring_parser(doc: str) -> None:
    doc = inspect.cleandoc(doc)
    ours = parse_google(doc)
    if ours is not None:
        ref = _reference(doc)
        assert ref is None or ours == ref
