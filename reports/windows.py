"""The window a report covers: last hour, day or week before now, or a custom range, in a time
zone. One parser serves the web page and the API, so both refuse the same input the same way:
`WorkflowInputError` with field -> messages (the API's handler answers 400 with them).

A window is half-open, [start, end): a run submitted exactly at `start` is in it, one at `end`
is not. Its chart buckets are aligned on the wall clock of its time zone (a bucket of Asia/Kolkata
starts at :00 there, which is :30 in UTC); the first and last bucket may be cut by the window.

Every time a report shows - the page's header, its table's last and next runs, the charts'
buckets and ticks, the API's times - is on the window's wall clock, through one conversion,
`zone_time` (`Window.local`), and labelled with the zone's name where it is shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.utils.dateparse import parse_date, parse_datetime

from scheduler.dispatcher.cron import year_error
from scheduler.workflows import WorkflowInputError

WINDOWS: dict[str, timedelta] = {
    "hour": timedelta(hours=1),
    "day": timedelta(days=1),
    "week": timedelta(days=7),
}
WINDOW_CHOICES = (*WINDOWS, "custom")
DEFAULT_WINDOW = "day"
# A custom range is at most this long: a week of hourly bars is 168 bars; past that they are
# days, and a month of days is what one page still reads at a glance.
MAX_RANGE = timedelta(days=31)

# Bucket width by window length: a short window in 5-minute bars, up to 8 days in hours, longer
# ones in days ("runs per hour" is the day and week view).
_BUCKETS = ((timedelta(hours=3), timedelta(minutes=5)), (timedelta(days=8), timedelta(hours=1)))
_DAY = timedelta(days=1)


@dataclass(frozen=True)
class Window:
    name: str  # hour, day, week or custom
    start: datetime  # aware, inclusive
    end: datetime  # aware, exclusive
    tz: ZoneInfo
    bucket: timedelta

    @property
    def tz_name(self) -> str:
        return self.tz.key

    def local(self, moment: datetime) -> datetime:
        """`moment` on this window's wall clock (see `zone_time`)."""
        return zone_time(moment, self.tz)

    def text(self, moment: datetime, *, weekday: bool = False) -> str:
        """`moment` as the report writes it, in this window's zone (see `zone_text`)."""
        return zone_text(moment, self.tz, weekday=weekday)

    @property
    def bucket_label(self) -> str:
        return {300: "5 minutes", 3600: "hour", 86400: "day"}.get(int(self.bucket.total_seconds()), "bucket")

    def bucket_starts(self) -> list[datetime]:
        """Every bucket's start in the window, as local wall-clock times (naive): the first is
        the window's start rounded down to the bucket, so the first and last bucket may be cut
        by the window. The database groups by the same wall-clock arithmetic (`date_bin` on
        the local time), so the two agree also across a daylight-saving change."""
        first = self.start.astimezone(self.tz).replace(tzinfo=None)
        last = self.end.astimezone(self.tz).replace(tzinfo=None)
        seconds = int(self.bucket.total_seconds())
        midnight = datetime.combine(first.date(), time())
        offset = int((first - midnight).total_seconds()) // seconds * seconds
        cursor = midnight + timedelta(seconds=offset)
        starts = []
        while cursor < last:
            starts.append(cursor)
            cursor += self.bucket
        return starts


def zone_time(moment: datetime, zone: ZoneInfo) -> datetime:
    """The report's one time conversion: an aware `moment` on `zone`'s wall clock. A naive
    `moment` is a wall-clock time of `zone` already (a bucket's start) and is only marked so."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=zone)
    return moment.astimezone(zone)


def zone_text(moment: datetime, zone: ZoneInfo, *, weekday: bool = False) -> str:
    """`moment` in `zone` as the report writes it: "5 Jan 17:30" ("Mon 5 Jan 17:30")."""
    local = zone_time(moment, zone)
    return f"{local:%a} " * weekday + f"{local.day} {local:%b %H:%M}"


def _bucket_for(span: timedelta) -> timedelta:
    for longest, bucket in _BUCKETS:
        if span <= longest:
            return bucket
    return _DAY


class _OutOfRange(ValueError):
    pass


def _parse_moment(value: str, *, zone: ZoneInfo, end: bool) -> datetime | None:
    """A date-time (ISO 8601; naive ones are in `zone`) or a date: a start date is its midnight,
    an end date includes that whole day (the next midnight). _OutOfRange (the message) for a
    year the scheduler does not take, before any arithmetic on it."""
    value = value.strip()
    try:
        # A date first: Python reads "2026-01-10" as a date-time (midnight) too.
        day = parse_date(value)
        moment = None if day is not None else parse_datetime(value)
    except ValueError:
        return None
    parsed = day if day is not None else moment
    if parsed is not None and (why := year_error(parsed)):
        raise _OutOfRange(why)
    if day is not None:
        return datetime.combine(day + timedelta(days=1) if end else day, time(), tzinfo=zone)
    if moment is None:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=zone)


def window_parse(params: Mapping[str, str], *, now: datetime) -> Window:
    """The window asked for by `params` (window, start, end, tz - query parameters), ending at
    `now` unless it is a custom range. Raises WorkflowInputError (field -> messages) for an
    unknown window or time zone, a malformed or missing date, an end not after its start, or a
    range longer than MAX_RANGE."""
    errors: dict[str, str] = {}
    tz_name = (params.get("tz") or "").strip() or settings.TIME_ZONE
    try:
        zone = ZoneInfo(tz_name)
    except (ZoneInfoNotFoundError, ValueError):
        errors["tz"] = f"unknown time zone {tz_name!r} (use an IANA name such as Europe/Paris)"
        zone = ZoneInfo("UTC")
    raw_start = (params.get("start") or "").strip()
    raw_end = (params.get("end") or "").strip()
    name = (params.get("window") or "").strip() or ("custom" if raw_start or raw_end else DEFAULT_WINDOW)
    if name not in WINDOW_CHOICES:
        raise WorkflowInputError({**errors, "window": f"must be one of {', '.join(WINDOW_CHOICES)}"})
    if name != "custom":
        for field, raw in (("start", raw_start), ("end", raw_end)):
            if raw:
                errors[field] = "only with window=custom"
        if errors:
            raise WorkflowInputError(errors)
        return Window(
            name=name, start=now - WINDOWS[name], end=now, tz=zone, bucket=_bucket_for(WINDOWS[name])
        )

    moments: dict[str, datetime] = {}
    for field, raw in (("start", raw_start), ("end", raw_end)):
        if not raw:
            errors[field] = "required for a custom range"
            continue
        try:
            moment = _parse_moment(raw, zone=zone, end=field == "end")
        except _OutOfRange as exc:
            errors[field] = str(exc)
            continue
        if moment is None:
            errors[field] = (
                "not a date or date-time (YYYY-MM-DD, or YYYY-MM-DDTHH:MM with an optional offset)"
            )
        else:
            moments[field] = moment
    if not errors:
        start, end = moments["start"], moments["end"]
        if end <= start:
            errors["end"] = "must be after start"
        elif end - start > MAX_RANGE:
            errors["end"] = f"a range is at most {MAX_RANGE.days} days long"
    if errors:
        raise WorkflowInputError(errors)
    span = moments["end"] - moments["start"]
    return Window(
        name="custom", start=moments["start"], end=moments["end"], tz=zone, bucket=_bucket_for(span)
    )
