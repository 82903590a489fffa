"""Footnotes once per page: a note the page has already given is not given again under a later table.

Each table's notes are a ``<ul class="notes">`` list, one ``<li>`` a note; a note that lists rows
(``^`` and the rows whose items/s it explains) has them as the following items, indented (leading
spaces, or a ``style`` of their own). ``once_per_page`` keeps the first of each note, in reading
order, and in each later list replaces the repeats by one line linking to the sections that gave
them; a repeated note with rows of its own keeps them, under its marker alone (``^ = (as noted
above)``). Notes are compared by their exact text. Presentation only: markup in, fewer items out.

Documented in docs/ci.md (section "Reports").
"""

from __future__ import annotations

import re

_LIST = re.compile(r'<ul class="notes">(?P<items>.*?)</ul>', re.S)
_ITEM = re.compile(r"<li(?P<attrs>[^>]*)>(?P<text>.*?)</li>", re.S)
_SECTION = re.compile(r'<section id="(?P<id>[^"]*)"><h2>(?P<title>.*?)</h2>')
#: A note's marker: the text before `` = `` when it is short (``n/m``, ``^``, ``*``).
_MARKER = re.compile(r"(?P<marker>\S.{0,11}?) = ")


def _is_row(item: re.Match[str]) -> bool:
    """Whether a list item is a row under the note before it (indented), not a note of its own."""
    return "style=" in item["attrs"] or item["text"][:1].isspace()


def _marker(note: str) -> str:
    found = _MARKER.match(note)
    return f"{found['marker']} = (as noted above)" if found else f"{note[:40].rstrip()}... (as noted above)"


def once_per_page(page: str) -> str:
    """``page`` with every note that an earlier notes list of it gave replaced (the module docstring
    says how); the sections are found by their ``<section id=...><h2>`` openings."""
    sections = [(m.start(), m["id"], m["title"]) for m in _SECTION.finditer(page)]
    given: dict[str, tuple[str, str]] = {}

    def where(position: int) -> tuple[str, str]:
        # The innermost section the list is in: the last one opened before it.
        before = [(ident, title) for start, ident, title in sections if start < position]
        return before[-1] if before else ("", "")

    def once(found: re.Match[str]) -> str:
        here = where(found.start())
        items = list(_ITEM.finditer(found["items"]))
        kept: list[str] = []
        repeated: dict[tuple[str, str], None] = {}
        dropped = 0
        for index, item in enumerate(items):
            if _is_row(item):
                kept.append(item[0])
                continue
            note = item["text"].strip()
            if note not in given:
                given[note] = here
                kept.append(item[0])
            elif index + 1 < len(items) and _is_row(items[index + 1]):
                kept.append(f"<li>{_marker(note)}</li>")
            else:
                repeated.setdefault(given[note], None)
                dropped += 1
        if repeated:
            places = ", ".join(f'<a href="#{ident}">{title or ident}</a>' for ident, title in repeated)
            kept.append(
                f'<li class="seen">{dropped} more note(s) apply here, as given above under {places}</li>'
            )
        return f'<ul class="notes">{"".join(kept)}</ul>' if kept else ""

    return _LIST.sub(once, page)
