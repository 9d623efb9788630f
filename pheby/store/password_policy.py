"""Which new passwords are refused: under 12 characters, or guessable (a zxcvbn score under 3).

zxcvbn is given the account's name and this server's own words as user inputs, so `alice2024alice`
counts as weak for alice. It reads at most `SCORED_CHARS` characters (its matching grows with the
length): a longer password is judged by its start, which must be strong on its own.
"""

import threading

import zxcvbn

from pheby.errors import Unprocessable

MIN_CHARS = 12
MIN_SCORE = 3  # zxcvbn's "safely unguessable: moderate protection from offline slow-hash scenario"
SCORED_CHARS = 72  # zxcvbn's own ceiling; beyond it the start decides
SERVER_WORDS = ("pheby", "hope", "hermes", "agent")
# zxcvbn keeps the user inputs of the call in a module-level dictionary: one call at a time.
_ZXCVBN = threading.Lock()


def refusal(password: str, account_name: str) -> str | None:
    """Why `password` may not be `account_name`'s, in words that say what to do; None if it may."""
    if len(password) < MIN_CHARS:
        return f"Choose a password of at least {MIN_CHARS} characters (a few unrelated words are easy to remember)"
    with _ZXCVBN:
        result = zxcvbn.zxcvbn(password[:SCORED_CHARS], user_inputs=[account_name, *SERVER_WORDS])
    if result["score"] >= MIN_SCORE:
        return None
    feedback = result["feedback"]
    hints = [feedback["warning"], *feedback["suggestions"]] if feedback["warning"] else feedback["suggestions"]
    advice = " ".join(h if h.endswith(".") else f"{h}." for h in hints if h)
    return f"This password is too easy to guess. {advice or 'Add another word or two.'}".strip()


def check_new_password(password: str, account_name: str) -> None:
    """Raise `Unprocessable` (422) with what to do when `password` may not be `account_name`'s."""
    reason = refusal(password, account_name)
    if reason is not None:
        raise Unprocessable(reason)
