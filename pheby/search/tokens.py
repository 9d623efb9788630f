"""Words as the index's tokenizer sees them (FTS5 `unicode61`, `remove_diacritics 2`): runs of letters,
digits and private-use characters, compared case- and accent-folded.

The index tokenizes in SQLite; this is the same rule in Python, used to read a query's words and to
find them again in a result's text for its highlights. Where the two could differ (a character newer
than SQLite's Unicode tables), the index decides what matches, and a highlight may be missing.
"""

import unicodedata
from typing import NamedTuple


class Token(NamedTuple):
    start: int  # in code points
    end: int
    folded: str


def is_token_char(char: str) -> bool:
    category = unicodedata.category(char)
    return category[0] in "LN" or category in ("Co", "Mn")


def fold(word: str) -> str:
    """Lower case, diacritics removed (é → e, Å → a)."""
    lowered = word.lower()
    if lowered.isascii():  # most text: nothing to decompose
        return lowered
    decomposed = unicodedata.normalize("NFD", lowered)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def tokens(text: str) -> list[Token]:
    """The text's tokens in order, with where each is."""
    found: list[Token] = []
    start: int | None = None
    for i, char in enumerate(text):
        if is_token_char(char):
            if start is None:
                start = i
        elif start is not None:
            found.append(Token(start, i, fold(text[start:i])))
            start = None
    if start is not None:
        found.append(Token(start, len(text), fold(text[start:])))
    return found
