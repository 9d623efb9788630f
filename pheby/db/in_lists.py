"""Binding a list of values to `IN (…)`: in chunks, each with its placeholders, the same on both engines."""

from collections.abc import Iterator, Sequence
from typing import Final, TypeVar

T = TypeVar("T")

IN_CHUNK: Final = 500  # values one statement binds at once (well under either engine's limit on parameters)


def in_chunks(values: Sequence[T], size: int = IN_CHUNK) -> Iterator[tuple[Sequence[T], str]]:
    """Each chunk of `values` with its placeholders (`?, ?, ?`), for `… IN ({marks})`."""
    for start in range(0, len(values), size):
        chunk = values[start : start + size]
        yield chunk, ", ".join("?" * len(chunk))
