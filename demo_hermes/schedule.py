"""Job schedules in the four forms ``cron/jobs.py`` accepts, and when each fires next.

- ``"30m"`` / ``"2h"`` / ``"1d"``: once, after that delay
- ``"every 30m"`` / ``"every 2h"``: an interval (displayed in minutes)
- ``"0 9 * * 1-5"``: a 5-field cron expression
- ``"2030-01-02T03:04"``: once, at that time (a naive time is UTC here)
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

__all__ = ["InvalidSchedule", "ParsedSchedule", "next_run", "parse_schedule"]

_UNIT_MINUTES: Final = {
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 1),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 60),
    **dict.fromkeys(("d", "day", "days"), 1440),
}
_DURATION: Final = re.compile(r"^(\d+)\s*([a-z]+)$")
_PAST_GRACE: Final = timedelta(minutes=2)
_CRON_FIELDS: Final = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTHS: Final = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS: Final = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_CRON_NAMES: Final[tuple[dict[str, int], ...]] = (
    {},
    {},
    {},
    {month: index + 1 for index, month in enumerate(_MONTHS)},
    {day: index for index, day in enumerate(_WEEKDAYS)},
)
_CRON_SEARCH_DAYS: Final = 366 * 5  # long enough to find Feb 29 from anywhere


class InvalidSchedule(ValueError):
    def __init__(self, text: str) -> None:
        # Verbatim 0.19.0 text; the jobs routes return it with HTTP 500.
        super().__init__(
            f"Invalid schedule '{text}'. Use:\n"
            "  - Duration: '30m', '2h', '1d' (one-shot)\n"
            "  - Interval: 'every 30m', 'every 2h' (recurring)\n"
            "  - Cron: '0 9 * * *' (cron expression)\n"
            "  - Timestamp: '2026-02-03T14:00:00' (one-shot at time)"
        )


@dataclass(frozen=True)
class ParsedSchedule:
    schedule: dict[str, Any]  # the job's "schedule" object as Hermes stores it
    next_run_at: datetime | None
    one_shot: bool


def _minutes(amount: str, unit: str) -> int | None:
    factor = _UNIT_MINUTES.get(unit)
    return int(amount) * factor if factor is not None and int(amount) > 0 else None


def _cron_values(field_text: str, index: int) -> set[int] | None:
    low, high = _CRON_FIELDS[index]
    names = _CRON_NAMES[index]
    values: set[int] = set()
    for part in field_text.lower().split(","):
        base, _, step_text = part.partition("/")
        if step_text and not step_text.isdigit():
            return None
        step = int(step_text) if step_text else 1
        if base == "*":
            start, end = low, high
        else:
            first, _, last = base.partition("-")
            start_value = names.get(first, int(first) if first.isdigit() else None)
            end_value = names.get(last, int(last) if last.isdigit() else None) if last else None
            if start_value is None or (last and end_value is None):
                return None
            start = start_value
            end = end_value if end_value is not None else (high if step_text else start_value)
        if step < 1 or not low <= start <= end <= high:
            return None
        values.update(range(start, end + 1, step))
    return values


def _cron_next(expr: str, after: datetime) -> datetime | None:
    fields = expr.split()
    parsed = [_cron_values(text, index) for index, text in enumerate(fields)]
    minutes, hours, days, months, weekdays = parsed
    if minutes is None or hours is None or days is None or months is None or weekdays is None:
        return None
    weekdays = {7 if d == 0 else d for d in weekdays}  # cron: 0 and 7 are Sunday; isoweekday: Sunday is 7
    days_restricted, weekdays_restricted = not fields[2].startswith("*"), not fields[4].startswith("*")
    start = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    for offset in range(_CRON_SEARCH_DAYS):
        day = (start + timedelta(days=offset)).date()
        if day.month not in months:
            continue
        day_match, weekday_match = day.day in days, day.isoweekday() in weekdays
        # Standard cron: when both day fields are restricted, either may match.
        if days_restricted and weekdays_restricted:
            if not (day_match or weekday_match):
                continue
        elif not (day_match and weekday_match):
            continue
        for hour in sorted(hours):
            for minute in sorted(minutes):
                candidate = datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)
                if candidate >= start:
                    return candidate
    return None


def parse_schedule(text: str, now: datetime) -> ParsedSchedule:
    """Parse a schedule string; ``InvalidSchedule`` for anything Hermes would reject."""
    raw = text.strip()
    lowered = raw.lower()
    if lowered.startswith("every "):
        match = _DURATION.match(lowered.removeprefix("every ").strip())
        minutes = _minutes(*match.groups()) if match else None
        if minutes is None:
            raise InvalidSchedule(text)
        schedule = {"kind": "interval", "minutes": minutes, "display": f"every {minutes}m"}
        return ParsedSchedule(schedule, now + timedelta(minutes=minutes), one_shot=False)
    match = _DURATION.match(lowered)
    if match:
        minutes = _minutes(*match.groups())
        if minutes is None:
            raise InvalidSchedule(text)
        run_at = now + timedelta(minutes=minutes)
        schedule = {"kind": "once", "run_at": run_at.isoformat(), "display": f"once in {raw}"}
        return ParsedSchedule(schedule, run_at, one_shot=True)
    if len(raw.split()) == 5:
        next_at = _cron_next(raw, now)
        if next_at is None:
            raise InvalidSchedule(text)
        return ParsedSchedule({"kind": "cron", "expr": raw, "display": raw}, next_at, one_shot=False)
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidSchedule(text) from None
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    if moment < now - _PAST_GRACE:
        raise InvalidSchedule(text)
    schedule = {"kind": "once", "run_at": moment.isoformat(), "display": f"once at {moment:%Y-%m-%d %H:%M}"}
    return ParsedSchedule(schedule, moment, one_shot=True)


def next_run(schedule: dict[str, Any], after: datetime) -> datetime | None:
    """When a recurring schedule fires after ``after``; None for a one-shot schedule."""
    if schedule.get("kind") == "interval":
        return after + timedelta(minutes=int(schedule["minutes"]))
    if schedule.get("kind") == "cron":
        return _cron_next(str(schedule["expr"]), after)
    return None
