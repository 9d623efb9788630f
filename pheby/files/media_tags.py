"""`MEDIA:<path>` tags in agent text: found for delivery, never shown to a client.

Hermes's agents end a reply with `MEDIA:/abs/path.ext` to deliver a file. Drafts are cumulative,
so a tag still being streamed (`MED`, `MEDIA:/tm`) is held back until it is complete or proven
not to be a tag.
"""

import re

# A tag runs to the next whitespace; quotes or backticks around it are dropped too.
_TAG = re.compile(r"""[`"']?MEDIA:(?P<path>[^\s`"']+)[`"']?""")
_PARTIAL_PREFIXES = tuple("MEDIA:"[:i] for i in range(1, 7))  # "M" … "MEDIA:"


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


def visible_draft(draft: str) -> str:
    """A cumulative draft safe to show: complete tags removed, a tag still streaming held back."""
    cut = len(draft)
    last_word_start = max(draft.rfind(" "), draft.rfind("\n"), draft.rfind("\t")) + 1
    tail = draft[last_word_start:].lstrip("`\"'")
    if tail.startswith(_PARTIAL_PREFIXES):
        cut = last_word_start
    shown = draft[:cut]
    # Drafts are re-checked on every delta: skip the regex unless a tag is there at all.
    return (_TAG.sub("", shown) if "MEDIA:" in shown else shown).rstrip()
