"""A result's snippet: a short excerpt of the matched text and where the query's terms are in it.

Highlights are `[start, end)` ranges of code points in the snippet, never markup: a client renders
the pieces as text. Line breaks and tabs become spaces one for one, so offsets stay put.
"""

from collections.abc import Sequence

from pheby.search.query import SearchQuery, Term
from pheby.search.tokens import Token, tokens

SNIPPET_CHARS = 160
LEAD_CHARS = 40  # how much text comes before the first highlight
ELLIPSIS = "…"

Range = tuple[int, int]


def highlights(text: str, query: SearchQuery) -> list[Range]:
    """Where the query's terms occur in `text`, in order, overlapping ones merged."""
    found = tokens(text)
    ranges: list[Range] = []
    for term in query.terms:
        ranges.extend(_occurrences(found, term))
    merged: list[Range] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _occurrences(found: Sequence[Token], term: Term) -> list[Range]:
    *whole, last = term.words
    width = len(term.words)
    hits: list[Range] = []
    for i in range(len(found) - width + 1):
        end = found[i + width - 1]
        if (end.folded.startswith(last) if term.prefix else end.folded == last) and all(
            found[i + j].folded == word for j, word in enumerate(whole)
        ):
            hits.append((found[i].start, end.end))
    return hits


def snippet(text: str, ranges: Sequence[Range], width: int = SNIPPET_CHARS) -> tuple[str, list[Range]]:
    """About `width` characters of `text` around its first highlight, cut at spaces, with "…" where
    text was left out; and the highlights that fall in it, counted in the snippet."""
    flat = text.replace("\r", " ").replace("\n", " ").replace("\t", " ")
    start = 0
    if ranges and ranges[0][0] > LEAD_CHARS:
        start = ranges[0][0] - LEAD_CHARS
        space = flat.find(" ", start, ranges[0][0])
        start = space + 1 if space != -1 else start
    end = min(len(flat), start + width)
    if ranges and end < ranges[0][1]:
        end = ranges[0][1]  # the first highlight is shown whole
    if end < len(flat):
        space = flat.rfind(" ", start, end)
        end = space if space > (ranges[0][1] if ranges else start) else end
    lead = ELLIPSIS if start > 0 else ""
    excerpt = lead + flat[start:end]
    shift = len(lead) - start
    shown = [(max(s, start) + shift, min(e, end) + shift) for s, e in ranges if s < end and e > start]
    if end < len(flat):
        excerpt += ELLIPSIS
    return excerpt, shown
