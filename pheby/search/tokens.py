"""Words as the index's tokenizer sees them (FTS5 `unicode61`, `remove_diacritics 2`): runs of letters,
digits and private-use characters, compared case- and accent-folded.

The index tokenizes in SQLite; this is the same rule in Python, used to read a query's words and to
find them again in a result's text for its highlights. Where the two could differ (a character newer
than SQLite's Unicode tables), the index decides what matches, and a highlight may be missing.
"""

import functools
import re
import sys
import unicodedata
from typing import NamedTuple


class Token(NamedTuple):
    start: int  # in code points
    end: int
    folded: str


def fold(word: str) -> str:
    """Lower case, diacritics removed (é → e, Å → a)."""
    lowered = word.lower()
    if lowered.isascii():  # most text: nothing to decompose
        return lowered
    return unicodedata.normalize("NFD", lowered).translate(_combining())


@functools.cache
def _combining() -> dict[int, None]:
    """Every combining character, to delete (built once, on first use: a pass over all code points)."""
    return {c: None for c in range(sys.maxunicode + 1) if unicodedata.combining(chr(c))}


@functools.cache
def _marks() -> dict[int, str]:
    """Every nonspacing mark (Mn), as a letter: in a text masked so, `[^\\W_]+` (exactly L* and N*) finds
    the token runs, at the same positions."""
    return {c: "a" for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Mn"}


_PRIVATE_USE = re.compile("[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd]")  # Co
_RUNS = re.compile(r"[^\W_]+")


def _masked(text: str) -> str:
    return text if text.isascii() else _PRIVATE_USE.sub("a", text.translate(_marks()))


def tokens(text: str) -> list[Token]:
    """The text's tokens in order, with where each is."""
    return [
        Token(start, end, fold(text[start:end])) for start, end in (m.span() for m in _RUNS.finditer(_masked(text)))
    ]


def token_count(text: str) -> int:
    """How many tokens the text holds (`len(tokens(text))`, without making them)."""
    return len(_RUNS.findall(_masked(text)))
