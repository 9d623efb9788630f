"""`MEDIA:<path>` tags in agent text: found for delivery, never shown to a client.

Hermes's agents end a reply with `MEDIA:/abs/path.ext` to deliver a file. Drafts are cumulative,
so a tag still being streamed (`MED`, `MEDIA:/tm`) is held back until it is complete or proven
not to be a tag. `GrowingDraft` gives a streamed draft's visible text delta by delta, in time that
does not grow with the draft (unless it holds a tag).
"""

import re

# A tag runs to the next whitespace; quotes or backticks around it are dropped too.
_TAG = re.compile(r"""[`"']?MEDIA:(?P<path>[^\s`"']+)[`"']?""")
_TAG_TEXT = "MEDIA:"
_QUOTES = "`\"'"
_PARTIAL_PREFIXES = tuple(_TAG_TEXT[:i] for i in range(1, len(_TAG_TEXT) + 1))  # "M" … "MEDIA:"


def media_paths(text: str) -> list[str]:
    """The paths of every complete MEDIA: tag, in order, without duplicates."""
    seen: dict[str, None] = {}
    for match in _TAG.finditer(text):
        seen.setdefault(match.group("path"), None)
    return list(seen)


def strip_media(text: str) -> str:
    """The final text with every tag removed and the whitespace it leaves tidied."""
    stripped = _TAG.sub("", text)
    lines = [line.rstrip() for line in stripped.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _last_word_start(text: str) -> int:
    """Where the last word of `text` starts: after its last whitespace (0 without any)."""
    return max(text.rfind(" "), text.rfind("\n"), text.rfind("\t")) + 1


def visible_draft(draft: str) -> str:
    """A cumulative draft safe to show: complete tags removed, a tag still streaming held back."""
    cut = len(draft)
    last_word_start = _last_word_start(draft)
    tail = draft[last_word_start:].lstrip(_QUOTES)
    if tail.startswith(_PARTIAL_PREFIXES):
        cut = last_word_start
    shown = draft[:cut]
    # Drafts are re-checked on every delta: skip the regex unless a tag is there at all.
    return (_TAG.sub("", shown) if _TAG_TEXT in shown else shown).rstrip()


class GrowingDraft:
    """A draft that grows by deltas, and its `visible_draft` after each one, found from the delta:
    where the last word starts and whether a tag has appeared are kept, not searched for in the
    whole draft again (a draft holding a tag is cut with the regex, as `visible_draft` does)."""

    __slots__ = ("_has_tag", "_word_start", "raw")

    def __init__(self) -> None:
        self.raw = ""
        self._word_start = 0  # where the last word starts (after the last whitespace)
        self._has_tag = False  # "MEDIA:" somewhere in `raw`

    def add(self, delta: str) -> str:
        """Append `delta`; the draft's visible text (`visible_draft(self.raw)`)."""
        start = len(self.raw)
        self.raw += delta
        word_start = _last_word_start(delta)
        if word_start:
            self._word_start = start + word_start
        if not self._has_tag:
            # A new "MEDIA:" overlaps the delta: look from 5 characters before it.
            self._has_tag = _TAG_TEXT in self.raw[max(0, start - len(_TAG_TEXT) + 1) :]
        if self._has_tag:
            return visible_draft(self.raw)
        # No tag anywhere: only a tag being streamed in the last word is held back.
        head = self.raw[self._word_start : self._word_start + 16]
        tail = head.lstrip(_QUOTES)
        if not tail and len(head) == 16:  # a word of quotes that long: look at all of it
            tail = self.raw[self._word_start :].lstrip(_QUOTES)
        cut = self._word_start if tail.startswith(_PARTIAL_PREFIXES) else len(self.raw)
        return self.raw[:cut].rstrip()
