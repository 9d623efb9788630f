"""BM25 for a window's candidate rows, computed here from their text rather than by FTS5's `bm25()`.

`bm25()` first counts, once per query, the rows holding each of the query's phrases in the whole
table (every account's). For a word that is a walk of its list of rows; for a phrase of common words
it checks positions in every row holding both, about 100 ms on a million messages (and the counts
let other accounts' text weigh in a ranking). `Ranker.ranked` computes each term's term-frequency and
length part over the rows a window found, from their text: the term's occurrences and the row's
length in tokens, against the index's own average length, with `bm25()`'s k1 and b. A query of one
term needs no IDF (it is the same for every row), so its order is `bm25()`'s; several terms are
weighed by IDFs the caller estimates in the account (`pheby.search.index`), with `idf`.

A prefix longer than `INDEXED_PREFIX_MAX` is looked up as its first `INDEXED_PREFIX_MAX` letters
(a prefix list the index keeps) and the rows are then checked here for the whole prefix: the MATCH
finds a superset, and `Ranker.ranked` keeps the rows that really match.
"""

import math
import re
from collections.abc import Mapping, Sequence
from typing import Final

from pheby.search.query import SearchQuery, Term
from pheby.search.tokens import fold

INDEXED_PREFIX_MAX: Final = 4  # the longest of the index's prefix lists (prefix = '2 3 4')
K1: Final = 1.2  # FTS5 bm25()'s parameters
B: Final = 0.75

# Tokens as the index's unicode61 sees them, in folded text, are runs of letters and digits. (Where
# Python's idea of a letter differs from SQLite's, a count may be off by one; the MATCH decided.)
_BETWEEN = r"[\W_]+"


def lookup_term(term: Term) -> Term:
    """The term as the index is asked for it: a prefix cut to the longest prefix list it keeps."""
    if term.prefix and len(term.words[-1]) > INDEXED_PREFIX_MAX:
        return Term((*term.words[:-1], term.words[-1][:INDEXED_PREFIX_MAX]), prefix=True)
    return term


def lookup_query(query: SearchQuery) -> SearchQuery:
    return SearchQuery(tuple(lookup_term(term) for term in query.terms))


def _pattern(term: Term) -> re.Pattern[str]:
    # The first word is a literal, so the regex engine skips ahead to it; the lookbehind after it
    # checks that it starts a token. (Overlapping repeats of a phrase, "ha ha" in "ha ha ha", count once.)
    head, *rest = (re.escape(word) for word in term.words)
    body = head + rf"(?<![^\W_]{head})" + "".join(_BETWEEN + word for word in rest)
    return re.compile(body if term.prefix else body + r"(?![^\W_])")


class Ranker:
    """The query's terms, to count in a row's text and to score it by."""

    def __init__(self, query: SearchQuery, average: float, weights: Sequence[float] | None = None) -> None:
        """`average`: the index's average row length (`average_length`); `weights`: each term's IDF (a
        single term needs none)."""
        # Terms the MATCH looked up cut short: only a row holding the whole term is a match.
        checked = [lookup_term(term) != term for term in query.terms]
        weights = weights or [1.0] * len(query.terms)
        self._terms = list(zip([_pattern(term) for term in query.terms], checked, weights, strict=True))
        self._average = average

    def ranked(self, rowids: Sequence[int], texts: Mapping[int, str], sizes: Mapping[int, int]) -> list[int]:
        """The rows that match, best first by BM25 (ties newest first, the larger rowid): each term's
        term-frequency and length part, times its weight.

        A term the MATCH found but the count here missed (a character SQLite and Python class apart)
        counts once: the index decided it is there."""
        terms, average = self._terms, self._average
        scored: list[tuple[float, int]] = []
        for rowid in rowids:
            text = texts.get(rowid)
            if text is None:
                continue  # gone meanwhile
            folded = fold(text)
            length = sizes.get(rowid, 0)
            norm = K1 * (1 - B + B * length / average) if average > 0 else K1
            score = 0.0
            for pattern, checked, weight in terms:
                count = len(pattern.findall(folded))
                if count == 0:
                    if checked:
                        break  # a cut-short prefix not there in full: no match
                    count = 1
                score += weight * count * (K1 + 1) / (count + norm)
            else:
                scored.append((score, rowid))
        scored.sort(reverse=True)
        return [rowid for _, rowid in scored]


def idf(rows: int, holding: float) -> float:
    """BM25's IDF of a term `holding` of `rows` rows hold, as FTS5's bm25() computes it (never below 1e-6)."""
    return max(1e-6, math.log((rows - holding + 0.5) / (holding + 0.5)))
