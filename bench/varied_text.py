"""Seeded text that reads like an agent's answer, for benchmarks: varied words, sentences, paragraphs.

A vocabulary of 600 pseudo-English words (built from syllables, 2 to 12 letters) drawn with a
Zipf-like skew, as real words are: common short words often, long ones rarely, so compression
sees text as repetitive as English and no more. Sentences of 6 to 20 words start with a capital and
end with punctuation; paragraphs of 2 to 5 sentences; now and then a bulleted list or a fenced code
block, as in a Markdown answer.
"""

import random
from functools import cache
from typing import Final

VOCABULARY_SIZE: Final = 600
_ONSETS: Final = (
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "w",
    "st",
    "tr",
    "pl",
    "ch",
    "sh",
)
_VOWELS: Final = ("a", "e", "i", "o", "u", "ea", "ou", "ai", "io")
_CODAS: Final = ("", "", "n", "r", "s", "t", "l", "nd", "ng", "ck", "st", "m")
_SHORT: Final = ("the", "a", "of", "to", "and", "in", "is", "it", "that", "for", "on", "as", "with", "be", "by")


@cache
def vocabulary(seed: int = 0) -> tuple[str, ...]:
    """`VOCABULARY_SIZE` distinct words: the common short ones first, then syllable-built ones."""
    rng = random.Random(seed)
    words: dict[str, None] = dict.fromkeys(_SHORT)
    while len(words) < VOCABULARY_SIZE:
        syllables = rng.choice((1, 1, 2, 2, 2, 3, 3, 4))
        word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables))
        if 2 <= len(word) <= 12:
            words.setdefault(word, None)
    return tuple(words)


def varied_text(words: int, seed: int) -> str:
    """About `words` words of Markdown prose (exactly `words` whitespace-separated tokens of prose and
    list items; a code block's lines count too)."""
    rng = random.Random(seed)
    vocab = vocabulary()
    weights = [1.0 / (rank + 1) ** 0.9 for rank in range(len(vocab))]
    out: list[str] = []
    count = 0

    def draw(n: int) -> list[str]:
        return rng.choices(vocab, weights, k=n)

    while count < words:
        kind = rng.random()
        if kind < 0.08 and out:
            items = [" ".join(draw(rng.randint(3, 8))) for _ in range(rng.randint(2, 4))]
            block = "\n".join(f"- {item}" for item in items)
        elif kind < 0.12 and out:
            lines = [f"{w}({', '.join(draw(2))})" for w in draw(rng.randint(2, 4))]
            block = "```\n" + "\n".join(lines) + "\n```"
        else:
            sentences = []
            for _ in range(rng.randint(2, 5)):
                sentence = draw(rng.randint(6, 20))
                if rng.random() < 0.3:
                    sentence[rng.randrange(1, len(sentence))] += ","
                sentences.append(" ".join(sentence).capitalize() + rng.choice(".....?!:"))
            block = " ".join(sentences)
        tokens = block.split()
        if count + len(tokens) > words:
            block = " ".join(tokens[: words - count])
        count += min(len(tokens), words - count)
        out.append(block)
    return "\n\n".join(out)
