"""Timestamps in log lines and job records: ISO 8601, Slurm's times and durations, epochs."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo

# Dates before this are not real log times (a version number, an uninitialised field).
MIN_TIME = 946_684_800.0  # 2000-01-01
MAX_AHEAD_S = 86_400.0  # a time further ahead of the clock is a wrong clock or not a time

_ISO = re.compile(
    r"(?<!\d)(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?"
    r"\s?(Z|[+-]\d{2}:?\d{2}|UTC)?(?!\d)"
)
_DURATION = re.compile(r"^(?:(\d{1,6})-)?(?:(\d{1,9}):)?(\d{1,9}):(\d{1,9}(?:\.\d{1,9})?)$")


def _zone(text: str | None, tz: tzinfo | None) -> tzinfo | None:
    if not text:
        return tz  # None: the machine's local time zone
    if text in ("Z", "UTC"):
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))


def _epoch(parts: tuple[str | None, ...], tz: tzinfo | None) -> float | None:
    year, month, day, hour, minute, second, frac, zone = parts
    try:
        moment = datetime(
            int(year or 0),
            int(month or 0),
            int(day or 0),
            int(hour or 0),
            int(minute or 0),
            int(second or 0),
            tzinfo=_zone(zone, tz),
        )
        at = moment.timestamp()
    except (ValueError, OverflowError, OSError):
        return None
    if frac:
        at += int(frac) / 10 ** len(frac)
    return at


def plausible(at: float | None, now: float) -> float | None:
    """`at` if it can be a real event time seen at `now`, else None."""
    if at is None or not math.isfinite(at) or at < MIN_TIME or at > now + MAX_AHEAD_S:
        return None
    return at


def find_time(text: str, now: float, tz: tzinfo | None = None, *, head: int = 64) -> float | None:
    """The first ISO-like timestamp in the first `head` characters of `text`, as epoch
    seconds; a time without a zone is in `tz` (None: local time)."""
    match = _ISO.search(text, 0, head)
    return None if match is None else plausible(_epoch(match.groups(), tz), now)


def parse_time(value: object, now: float, tz: tzinfo | None = None) -> float | None:
    """A time field: epoch seconds or milliseconds (number or digits), or ISO 8601 text."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        number = float(value)
    else:
        text = str(value).strip()
        if not text or text in ("Unknown", "None", "N/A"):
            return None
        try:
            number = float(text)
        except ValueError:
            match = _ISO.fullmatch(text) or _ISO.match(text)
            if match is None:
                date_only = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})", text)
                if date_only is None:
                    return None
                return plausible(_epoch((*date_only.groups(), "0", None, None), tz), now)
            return plausible(_epoch(match.groups(), tz), now)
    if not math.isfinite(number):
        return None
    if number > 1e11:  # milliseconds
        number /= 1000.0
    return plausible(number, now)


def parse_duration(text: str | None) -> float | None:
    """Slurm elapsed time `[D-][HH:]MM:SS`, or plain seconds, as seconds."""
    if not text:
        return None
    text = text.strip()
    match = _DURATION.match(text)
    if match is None:
        try:
            seconds = float(text)
        except ValueError:
            return None
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    days, hours, minutes, seconds = match.groups()
    return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)
