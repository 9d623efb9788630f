"""The search query grammar, and the FTS5 MATCH expression built from it (user text never reaches MATCH).

    query  := item ( whitespace item )*
    item   := word | word"*" | '"' words '"'
    word   := characters other than whitespace and '"'

Every item must be found (an implicit AND); a word holding punctuation (`can't`, `e-mail`) is the
phrase of its parts, as the index tokenized them; `word*` finds the words beginning so (at least
`PREFIX_MIN` letters before the `*`). `AND`, `OR`, `NOT` and `NEAR` in capitals are not operators of
this grammar: they are left out. Anything else is `BadRequest` (`bad_request` on the WebSocket, 400 on
REST): an empty query, a NUL byte, more than `QUERY_MAX_CHARS`, an unclosed quote, a `*` anywhere but
at a word's end, nothing but operators or punctuation, more than `TERMS_MAX` items.
"""

import re
from typing import Final, NamedTuple

from pheby.errors import BadRequest
from pheby.search.tokens import tokens

QUERY_MAX_CHARS: Final = 500
TERMS_MAX: Final = 16
PREFIX_MIN: Final = 2  # the index keeps prefixes of 2 and 3 characters; a 1-letter prefix would read every word
RESERVED: Final = frozenset({"AND", "OR", "NOT", "NEAR"})

_ITEM = re.compile(r'"(?P<phrase>[^"]*)(?P<closed>"?)|(?P<word>[^\s"]+)')


class Term(NamedTuple):
    """One item: its words in order (more than one: a phrase) and whether the last is a prefix."""

    words: tuple[str, ...]  # folded, as the index compares them
    prefix: bool

    def expression(self) -> str:
        """The item as an FTS5 phrase: quoted (its words are letters and digits only), `*` for a prefix."""
        return '"' + " ".join(self.words).replace('"', '""') + '"' + ("*" if self.prefix else "")


class SearchQuery(NamedTuple):
    terms: tuple[Term, ...]

    def match_expression(self) -> str:
        """Every term must match: FTS5's implicit AND of phrases."""
        return " ".join(term.expression() for term in self.terms)


def parse_query(text: str) -> SearchQuery:
    """The query's terms; `BadRequest` (with a message for the user) for anything outside the grammar."""
    if "\x00" in text:
        raise BadRequest("The search query holds a NUL character")
    if len(text) > QUERY_MAX_CHARS:
        raise BadRequest(f"Search queries are at most {QUERY_MAX_CHARS} characters")
    if not text.strip():
        raise BadRequest("Type something to search for")
    terms: list[Term] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            break
        item = _ITEM.match(text, position)
        assert item is not None  # every non-space character starts a word or a phrase
        position = item.end()
        if item["word"] is not None:
            term = _word_term(item["word"])
        elif not item["closed"]:
            raise BadRequest("A quoted phrase is not closed")
        else:
            term = _phrase_term(item["phrase"])
        if term is not None:
            terms.append(term)
    if not terms:
        raise BadRequest("The search query has no words to look for (AND, OR and NOT are not operators here)")
    if len(terms) > TERMS_MAX:
        raise BadRequest(f"Search for at most {TERMS_MAX} words or phrases at a time")
    return SearchQuery(tuple(terms))


def _word_term(word: str) -> Term | None:
    if word in RESERVED:
        return None
    prefix = word.endswith("*")
    stem = word[:-1] if prefix else word
    if "*" in stem:
        raise BadRequest("A * may only end a word (prefix*)")
    words = tuple(token.folded for token in tokens(stem))
    if not words:
        if prefix:
            raise BadRequest("A * must follow the beginning of a word (prefix*)")
        return None  # punctuation only: nothing the index could find
    if prefix and (len(words[-1]) < PREFIX_MIN or not stem[-1:].isalnum()):
        raise BadRequest(f"A prefix needs at least {PREFIX_MIN} letters or digits right before its *")
    return Term(words, prefix)


def _phrase_term(phrase: str) -> Term:
    words = tuple(token.folded for token in tokens(phrase))
    if not words:
        raise BadRequest("A quoted phrase needs words in it")
    return Term(words, prefix=False)
