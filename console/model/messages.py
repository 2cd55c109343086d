"""Messages as the browser shows them: the browser's query, where to start
reading each partition, one page of rows, and bytes rendered for a person.

Rules:

* Bytes from the cluster (keys, values, headers) are shown as a person reads
  them: ``auto`` picks JSON when the bytes parse as a JSON object or array,
  text when they are printable UTF-8, hex otherwise; ``text``, ``json`` and
  ``hex`` force one (JSON that does not parse falls back to text, text that
  is not UTF-8 to hex, and the view says which one was shown). At most
  :data:`SHOW_BYTES` of each are shown, and the view says when they were cut.
* An offset asked for outside a partition's log is clamped to it, and the page
  says so; a page holds at most :data:`MAX_BROWSE` messages.
* The browser shows a message on one line (:attr:`Rendered.line`: JSON
  compact, whitespace runs as one space, at most :data:`LINE_CHARS`
  characters) that expands to the whole of it; a page's rows may be sorted
  by partition, offset or timestamp, either way (:func:`sort_rows`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterable, Mapping
from typing import Literal

from .forms import InputError, int_field, offset_or_time

DecodeMode = Literal["auto", "text", "json", "hex"]
DECODE_MODES: tuple[DecodeMode, ...] = ("auto", "text", "json", "hex")
#: The most messages one browser page asks for.
MAX_BROWSE = 500
#: Bytes shown of one key, value or header before the rest is cut (the page
#: says so); a 1 MiB value must not make a 1 MiB table cell.
SHOW_BYTES = 4096
#: Characters of a key or value on a message's one line.
LINE_CHARS = 160
SORTS = ("partition", "offset", "timestamp")


# -- rendering bytes ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Rendered:
    """Bytes as shown: ``kind`` is ``null``, ``text``, ``json`` or ``hex``;
    ``size`` the length of the original bytes; ``cut`` whether ``text`` shows
    only the first :data:`SHOW_BYTES` of them."""

    kind: str
    text: str
    size: int = 0
    cut: bool = False
    #: A decoded frame's schema (type, id, subject), or why a frame was not decoded.
    schema: str = ""

    @property
    def line(self) -> str:
        """The bytes on one line: JSON compact, whitespace runs as one space, at
        most :data:`LINE_CHARS` characters (then an ellipsis)."""
        text = self.text
        if self.kind == "json":
            text = json.dumps(json.loads(text), separators=(", ", ": "), ensure_ascii=False)
        one = " ".join(text.split())
        return one if len(one) <= LINE_CHARS else one[: LINE_CHARS - 1] + "…"


_NULL = Rendered("null", "null")


def _printable(text: str) -> bool:
    return all(c.isprintable() or c in "\t\n\r" for c in text)


def _as_hex(data: bytes) -> Rendered:
    shown = data[:SHOW_BYTES]
    return Rendered("hex", shown.hex(" "), len(data), len(data) > SHOW_BYTES)


def render_bytes(data: bytes | None, mode: DecodeMode = "auto") -> Rendered:
    """Bytes as a person reads them (see the module rules)."""
    if data is None:
        return _NULL
    if mode == "hex":
        return _as_hex(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _as_hex(data)
    if mode in ("auto", "json"):
        stripped = text.lstrip()
        if mode == "json" or stripped[:1] in ("{", "["):
            try:
                parsed = json.loads(text)
            except ValueError:
                pass
            else:
                pretty = json.dumps(parsed, indent=2, ensure_ascii=False)
                return Rendered("json", pretty, len(data))
    if mode == "auto" and not _printable(text):
        return _as_hex(data)
    cut = len(data) > SHOW_BYTES
    if cut:
        text = data[:SHOW_BYTES].decode("utf-8", errors="replace")
    return Rendered("text", text, len(data), cut)


# -- message browser -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class BrowseQuery:
    """Where to read: ``start`` is ``beginning``, ``end`` (the last ``count``
    messages), ``offset`` (``value`` is one) or ``timestamp`` (``value`` in ms)."""

    topic: str
    partition: int | None  # None: every partition
    start: Literal["beginning", "end", "offset", "timestamp"]
    value: int
    count: int
    decode: DecodeMode
    sort: str = ""  # "": as read (see merge_messages), else one of SORTS
    descending: bool = False


def parse_browse_query(topic: str, form: Mapping[str, str]) -> BrowseQuery:
    """The message browser's query string: ``partition`` (empty or ``all``,
    the default: every partition), ``start``
    (``beginning``, ``end``, ``offset``, ``timestamp``; default ``end``; the
    page's words ``oldest`` and ``newest``, and Kafka's ``earliest`` and
    ``latest``, name the first two),
    ``offset``, ``timestamp``, ``count`` (1 to :data:`MAX_BROWSE`, default 20)
    ``decode`` (:data:`DECODE_MODES`), ``sort`` (:data:`SORTS`; empty: as
    read) and ``order`` (``asc``, the default, or ``desc``)."""
    partition = (
        None
        if form.get("partition", "").strip().lower() in ("", "all")
        else int_field(form, "partition", "partition")
    )
    count = int_field(form, "count", "count", minimum=1) or 20
    if count > MAX_BROWSE:
        raise InputError(f"count must be at most {MAX_BROWSE}, got {count}")
    decode = form.get("decode", "auto") or "auto"
    if decode not in DECODE_MODES:
        raise InputError(f"decode must be one of {', '.join(DECODE_MODES)}, got {decode!r}")
    start = form.get("start", "") or ("offset" if form.get("offset", "").strip() else "end")
    start = _START_WORDS.get(start.strip().lower(), start)
    value = 0
    if start in ("offset", "timestamp"):
        value = offset_or_time(form, start, "start at")
    elif start not in ("beginning", "end"):
        raise InputError(f"start must be beginning, end, offset or timestamp, got {start!r}")
    sort = form.get("sort", "") or ""
    if sort and sort not in SORTS:
        raise InputError(f"sort must be one of {', '.join(SORTS)}, got {sort!r}")
    order = form.get("order", "") or "asc"
    if order not in ("asc", "desc"):
        raise InputError(f"order must be asc or desc, got {order!r}")
    where = start  # checked above: one of the four
    return BrowseQuery(topic, partition, where, value, count, decode, sort, order == "desc")  # type: ignore[arg-type]


# What a person may type for the two ends: the page's words ("the oldest",
# "the newest") and Kafka's (auto.offset.reset's earliest and latest).
_START_WORDS = {
    "beginning": "beginning",
    "oldest": "beginning",
    "earliest": "beginning",
    "end": "end",
    "newest": "end",
    "latest": "end",
}


def sort_rows(rows: Iterable[MessageRow], sort: str, descending: bool) -> list[MessageRow]:
    """A page's rows by ``sort`` (:data:`SORTS`; ties by partition, then
    offset), or as they are with no ``sort``."""
    if not sort:
        return list(rows)
    keys = {
        "partition": lambda r: (r.partition, r.offset),
        "offset": lambda r: (r.offset, r.partition),
        "timestamp": lambda r: (r.timestamp_ms, r.partition, r.offset),
    }
    return sorted(rows, key=keys[sort], reverse=descending)


def plan_reads(
    q: BrowseQuery,
    lows: Mapping[int, int],
    highs: Mapping[int, int],
    by_time: Mapping[int, int | None],
) -> tuple[dict[int, int], list[str]]:
    """Where to start reading each partition (``lows``/``highs``: log start and
    high watermark per partition; ``by_time``: the first offset at or after
    ``q.value`` for a timestamp query, None past the end). Partitions with
    nothing to read from their start are left out. Returns the starts and
    notes for the person (an offset outside a log is clamped, and said so)."""
    starts: dict[int, int] = {}
    notes = []
    for p in sorted(highs):
        low, high = lows.get(p, 0), highs[p]
        if q.start == "beginning":
            start = low
        elif q.start == "end":
            start = max(high - q.count, low)
        elif q.start == "offset":
            start = min(max(q.value, low), high)
            # Said of a partition read, or the one asked for; not of every
            # empty partition of a topic browsed whole.
            if start != q.value and (start < high or len(highs) == 1):
                notes.append(
                    f"partition {p}: offset {q.value} is outside the log ({low} to {high}); "
                    f"read from {start}"
                )
        else:
            hit = by_time.get(p)
            start = high if hit is None else hit
        if start < high:
            starts[p] = start
    if q.start == "timestamp" and not starts:
        notes.append("no message at or after that time")
    return starts, notes


def merge_messages(
    rows: Iterable[MessageRow], start: str, count: int, *, partitions: int
) -> list[MessageRow]:
    """One page of messages read from ``partitions`` partitions: one partition's
    in offset order; several by time (then partition, offset). Read from the
    end, the newest ``count``, newest first (a person asking for the newest
    looks at the top); else the first ``count``, oldest first."""
    if partitions == 1:
        ordered = sorted(rows, key=lambda r: r.offset)
    else:
        ordered = sorted(rows, key=lambda r: (r.timestamp_ms, r.partition, r.offset))
    if start == "end":
        return ordered[::-1][:count]
    return ordered[:count]


@dataclasses.dataclass(frozen=True, slots=True)
class MessageRow:
    partition: int
    offset: int
    timestamp_ms: int
    timestamp: str
    key: Rendered
    value: Rendered
    headers: tuple[tuple[str, Rendered], ...]


def format_timestamp(ms: int) -> str:
    if ms < 0:
        return "-"
    return (
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def message_row(
    partition: int,
    offset: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]],
    mode: DecodeMode,
) -> MessageRow:
    return MessageRow(
        partition,
        offset,
        timestamp,
        format_timestamp(timestamp),
        render_bytes(key, mode),
        render_bytes(value, mode),
        tuple((name, render_bytes(v, mode)) for name, v in headers),
    )
