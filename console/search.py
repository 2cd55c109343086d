"""Searching a topic's messages on the server: what to look for, how to match
it and in what order to read, without I/O (the reading is
:meth:`~.cluster.Console.search`'s).

Rules:

* A search looks at the keys, the values or the headers (one named header, or
  any) of a topic's records, with a substring (of the bytes: the text typed,
  as UTF-8), a regular expression (Python's, over the bytes decoded as UTF-8,
  bad bytes replaced) or a JSON path (``$.user.id``, ``$.items[*].sku``,
  ``$["a b"][0]``; with ``== value`` the value found must equal it, a JSON
  literal or else text). A record without the field (a null key, no such
  header) does not match; JSON that does not parse does not match a path.
* Regular expressions whose matching can take exponential time are refused
  before any record is read: backreferences, and a repeated group that itself
  holds a repetition or an alternative (``(a+)+``, ``(a|aa)*``), the shapes
  of catastrophic backtracking. Only the first :data:`MAX_MATCH_BYTES` of a
  field are looked at.
* Newest first: each partition is read from its end backwards, a chunk of at
  most :data:`CHUNK` records at a time, the partitions in turns, until
  ``scan_limit`` records were looked at, ``max_results`` were found, or every
  partition was read to its start. Results are listed newest first (by
  timestamp, then partition and offset). The page says how many records were
  looked at of how many, and where each partition stopped, and offers to go
  on from there (``before``: ``partition:offset`` pairs).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from .model import InputError, MessageRow, int_field, topic_name

__all__ = [
    "CHUNK",
    "MAX_MATCH_BYTES",
    "MAX_SCAN",
    "SearchQuery",
    "check_regex",
    "format_before",
    "keep_newest",
    "matcher",
    "next_chunks",
    "parse_json_path",
    "parse_search_query",
    "record_matches",
    "sort_newest_first",
]

Target = Literal["value", "key", "header"]
Mode = Literal["substring", "regex", "jsonpath"]
TARGETS: tuple[Target, ...] = ("value", "key", "header")
MODES: tuple[Mode, ...] = ("substring", "regex", "jsonpath")

#: The most records one search page may look at.
MAX_SCAN = 1_000_000
#: Looked at unless the form says otherwise.
DEFAULT_SCAN = 10_000
#: The most matches one page shows.
MAX_RESULTS = 500
#: Records read of one partition per turn.
CHUNK = 500
#: The bytes of one field a match looks at.
MAX_MATCH_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class SearchQuery:
    topic: str
    partition: int | None  # None: every partition
    target: Target
    header: str | None  # with target "header": its name (None: any header)
    mode: Mode
    pattern: str
    scan_limit: int
    max_results: int
    before: dict[int, int]  # where to go on from, per partition (exclusive)


def parse_search_query(topic: str, form: Mapping[str, str]) -> SearchQuery:
    """The search form: ``q`` (what to look for), ``in`` (:data:`TARGETS`),
    ``header`` (its name, with ``in=header``; empty: any), ``mode``
    (:data:`MODES`), ``partition`` (empty or ``all``: every one), ``limit``
    (records to look at, up to :data:`MAX_SCAN`), ``max`` (matches to show, up to
    :data:`MAX_RESULTS`) and ``before`` (where the last page stopped)."""
    pattern = form.get("q", "")
    if not pattern.strip():
        raise InputError("q: give what to look for")
    target = form.get("in", "") or "value"
    if target not in TARGETS:
        raise InputError(f"in must be one of {', '.join(TARGETS)}, got {target!r}")
    mode = form.get("mode", "") or "substring"
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "regex":
        check_regex(pattern)
    elif mode == "jsonpath":
        parse_json_path(pattern)
    partition = (
        None
        if form.get("partition", "").strip().lower() in ("", "all")
        else int_field(form, "partition", "partition")
    )
    limit = int_field(form, "limit", "limit", minimum=1) or DEFAULT_SCAN
    if limit > MAX_SCAN:
        raise InputError(f"limit must be at most {MAX_SCAN:,}, got {limit:,}")
    most = int_field(form, "max", "max", minimum=1) or 50
    if most > MAX_RESULTS:
        raise InputError(f"max must be at most {MAX_RESULTS}, got {most}")
    header = form.get("header", "").strip() or None
    return SearchQuery(
        topic_name(topic),
        partition,
        target,
        header if target == "header" else None,
        mode,
        pattern,
        limit,
        most,
        _parse_before(form.get("before", "")),
    )


def _parse_before(raw: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for part in raw.split(","):
        if not part.strip():
            continue
        p, sep, o = part.partition(":")
        if not sep or not p.strip().isdigit() or not o.strip().isdigit():
            raise InputError(f"before must be partition:offset pairs, got {raw!r}")
        out[int(p)] = int(o)
    return out


def format_before(uppers: Mapping[int, int]) -> str:
    """``before``'s value for going on from ``uppers``."""
    return ",".join(f"{p}:{o}" for p, o in sorted(uppers.items()))


# -- regular expressions ------------------------------------------------------------------

_BACKREF = re.compile(r"\\[1-9]|\(\?P=")


def check_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled, unless it does not compile or has a shape whose
    matching can take exponential time (see the module's rules).

    Raises:
        InputError: naming what is wrong.
    """
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise InputError(f"q: not a regular expression: {exc}") from None
    if _BACKREF.search(pattern):
        raise InputError("q: backreferences are not allowed (their matching can take very long)")
    # A stack of the open groups: whether each holds a repetition or an alternative.
    stack: list[list[bool]] = [[False, False]]
    closed: list[bool] | None = None  # the group just closed, if the next token repeats it
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        repeated = False
        if c == "\\":
            i += 2
            closed = None
            continue
        if c == "[":  # a class: skip to its end
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
            closed = None
            continue
        if c == "(":
            stack.append([False, False])
            i += 1
            if pattern.startswith("?", i) and not pattern.startswith("?P<", i):
                i += 1  # (?:, (?=, (?i) ...: the "?" is no repetition
            closed = None
            continue
        if c == ")":
            closed = stack.pop() if len(stack) > 1 else None
            if closed is not None:  # what a group holds, its parent holds
                stack[-1][0] = stack[-1][0] or closed[0]
                stack[-1][1] = stack[-1][1] or closed[1]
            i += 1
            continue
        if c == "|":
            stack[-1][1] = True
        elif c in "*+":
            repeated = True
        elif c == "{":
            m = re.match(r"\{(\d*)(,?)(\d*)\}", pattern[i:])
            if m:
                repeated = m.group(2) == "," or int(m.group(1) or 0) > 1
                i += len(m.group(0)) - 1
        if repeated:
            stack[-1][0] = True
            if closed is not None and (closed[0] or closed[1]):
                raise InputError(
                    "q: a repeated group that holds a repetition or an alternative "
                    "(like (a+)+ or (a|b)*) can take exponential time; write it without"
                )
        closed = None
        i += 1
    return compiled


# -- JSON paths ---------------------------------------------------------------------------

_STEP = re.compile(r'\.([A-Za-z_][\w-]*)|\.\*|\[(\d+)\]|\[\*\]|\["((?:[^"\\]|\\.)*)"\]')
_ANY = object()


def parse_json_path(text: str) -> tuple[list[Any], Any]:
    """``(steps, wanted)`` of ``$.a[0]["b c"][*]`` optionally followed by
    ``== value``: steps are names, indexes or :data:`_ANY`; ``wanted`` is the
    value to equal (a JSON literal, else the text), or ``_ANY``.

    Raises:
        InputError: naming where the path is wrong.
    """
    path, sep, value = text.partition("==")
    path = path.strip()
    if not path.startswith("$"):
        raise InputError(f"q: a JSON path starts with $, got {path!r}")
    steps: list[Any] = []
    at = 1
    while at < len(path):
        m = _STEP.match(path, at)
        if m is None:
            raise InputError(f"q: JSON path {path!r}: cannot read from {path[at:]!r}")
        name, index, quoted = m.groups()
        if name is not None:
            steps.append(name)
        elif index is not None:
            steps.append(int(index))
        elif quoted is not None:
            steps.append(json.loads(f'"{quoted}"'))
        else:
            steps.append(_ANY)
        at = m.end()
    wanted: Any = _ANY
    if sep:
        raw = value.strip()
        try:
            wanted = json.loads(raw)
        except ValueError:
            wanted = raw
    return steps, wanted


def _at_path(doc: Any, steps: list[Any]) -> list[Any]:
    values = [doc]
    for step in steps:
        found: list[Any] = []
        for v in values:
            if step is _ANY:
                if isinstance(v, dict):
                    found.extend(v.values())
                elif isinstance(v, list):
                    found.extend(v)
            elif isinstance(step, int):
                if isinstance(v, list) and step < len(v):
                    found.append(v[step])
            elif isinstance(v, dict) and step in v:
                found.append(v[step])
        values = found
    return values


# -- matching -----------------------------------------------------------------------------


def matcher(q: SearchQuery) -> Callable[[bytes | None], bool]:
    """Whether one field's bytes match ``q``'s pattern."""
    if q.mode == "substring":
        needle = q.pattern.encode("utf-8")
        return lambda data: data is not None and needle in data[:MAX_MATCH_BYTES]
    if q.mode == "regex":
        rx = check_regex(q.pattern)
        return lambda data: (
            data is not None
            and (rx.search(data[:MAX_MATCH_BYTES].decode("utf-8", "replace")) is not None)
        )
    steps, wanted = parse_json_path(q.pattern)

    def by_path(data: bytes | None) -> bool:
        if data is None or len(data) > MAX_MATCH_BYTES:
            return False
        try:
            doc = json.loads(data)
        except ValueError:
            return False
        found = _at_path(doc, steps)
        return bool(found) if wanted is _ANY else any(v == wanted for v in found)

    return by_path


def record_matches(
    q: SearchQuery,
    match: Callable[[bytes | None], bool],
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]],
) -> bool:
    """Whether a record matches: its key, value, or one of its headers (the
    named one, or any)."""
    if q.target == "key":
        return match(key)
    if q.target == "value":
        return match(value)
    return any(match(v) for name, v in headers if q.header is None or name == q.header)


# -- what to read next --------------------------------------------------------------------


def next_chunks(
    uppers: Mapping[int, int], lows: Mapping[int, int], budget: int, chunk: int = CHUNK
) -> dict[int, tuple[int, int]]:
    """The next turn: for each partition not read to its start (its ``upper``
    above its ``low``), the offsets ``[start, upper)`` to read, the newest not
    yet read, at most ``chunk`` of them and together about ``budget``
    (at least one each)."""
    active = sorted(p for p, upper in uppers.items() if upper > lows[p])
    if not active or budget <= 0:
        return {}
    each = max(1, min(chunk, budget // len(active)))
    return {p: (max(lows[p], uppers[p] - each), uppers[p]) for p in active}


def keep_newest(hits: Iterable[Any], room: int) -> tuple[list[Any], list[Any]]:
    """The newest ``room`` of a turn's matching records (by timestamp, then
    partition and offset), and the others, left for the next page."""
    ordered = sorted(hits, key=lambda r: (r.timestamp, r.partition, r.offset), reverse=True)
    return ordered[: max(room, 0)], ordered[max(room, 0) :]


def sort_newest_first(rows: Iterable[MessageRow]) -> list[MessageRow]:
    return sorted(rows, key=lambda r: (r.timestamp_ms, r.partition, r.offset), reverse=True)
