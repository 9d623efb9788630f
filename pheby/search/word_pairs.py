"""Adjacent words as lexemes of their own, so the PostgreSQL index finds a phrase's rows without positions.

PostgreSQL's GIN index of a tsvector keeps which rows hold a lexeme, not where: a phrase (`<->`) is
looked up as the rows holding all of its words, and each of those rows is then read to check that the
words are adjacent. For a phrase of common words that are seldom adjacent that is most of the rows
holding both: thousands of rows read from the table to find a few. So each row's tsvector also holds a
lexeme for each pair of adjacent words in it, and a phrase is looked up by its pairs' lexemes instead of
its words (`pheby.search.postgres_index.lookup_tsquery`): the index then gives about the rows where the
pairs occur, and the check of positions runs on those only.

A pair's lexeme is its hash (CRC-32 of the two words), cut to `PAIR_BUCKETS` values and written as three
characters of `ALPHABET`: ASCII punctuation, which no word holds (a token is letters and digits,
`pheby.search.tokens`), so a pair's lexeme is never a word's. Pairs that share a lexeme only widen the
rows the index gives; the positions decide. The bound keeps the lexemes few, short and without
positions, and it bounds what a text's pairs can add to its tsvector (`PAIRS_MAX_BYTES`).
"""

import itertools
import zlib
from collections.abc import Sequence
from typing import Final

ALPHABET: Final = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"  # the 32 ASCII punctuation characters
PAIR_BUCKETS: Final = len(ALPHABET) ** 3
PAIRS_MAX_BYTES: Final = PAIR_BUCKETS * 3  # every lexeme a text's pairs can add, at most


def pair_lexeme(first: str, second: str) -> str:
    """The lexeme of two adjacent (folded) words."""
    bucket = zlib.crc32(f"{first} {second}".encode()) % PAIR_BUCKETS
    return ALPHABET[bucket >> 10] + ALPHABET[(bucket >> 5) & 31] + ALPHABET[bucket & 31]


def pair_lexemes(words: Sequence[str]) -> list[str]:
    """The lexemes of each pair of adjacent words, each once, in the order they first occur."""
    return list(dict.fromkeys(pair_lexeme(first, second) for first, second in itertools.pairwise(words)))
