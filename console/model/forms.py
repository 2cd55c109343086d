"""What a person types into the console's forms, parsed and checked.

Rules:

* Every refusal is an :class:`InputError` whose message names the field and
  says what is wanted; the HTTP driver shows it on an error page (status 400),
  never a traceback.
* A blank optional field is None (or the documented default), never 0 or an
  empty name: the cluster's own default then applies.
* The small parsers (:func:`int_field`, :func:`topic_name`, :func:`pairs`,
  :func:`parse_timestamp`) are shared by every form of the console, the
  message search's included, so that a field is checked alike everywhere.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Iterable, Mapping

#: Kafka's own limit and alphabet for topic names (``Topic.validate``).
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


class InputError(ValueError):
    """What a person typed cannot be used; the message says which field and why."""


def int_field(form: Mapping[str, str], name: str, label: str, *, minimum: int = 0) -> int | None:
    """The whole number in ``form[name]`` (None when blank), at least ``minimum``;
    ``label`` names the field in the refusal."""
    raw = form.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InputError(f"{label} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise InputError(f"{label} must be at least {minimum}, got {value}")
    return value


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch from a number of ms or an ISO 8601 date-time
    (UTC when it names no zone)."""
    text = text.strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InputError(
            f"timestamp must be milliseconds or an ISO date-time (2024-05-01T12:00:00), got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise InputError(f"timestamp must be after 1970, got {text!r}")
    return ms


def offset_or_time(form: Mapping[str, str], kind: str, doing: str) -> int:
    """The form's ``offset`` (``kind`` "offset") or ``timestamp`` in ms, required."""
    if kind == "offset":
        offset = int_field(form, "offset", "offset")
        if offset is None:
            raise InputError(f"offset: give the offset to {doing}")
        return offset
    raw = form.get("timestamp", "").strip()
    if not raw:
        raise InputError(f"timestamp: give the time to {doing}")
    return parse_timestamp(raw)


def parse_refresh(raw: str) -> int | None:
    """A page's ``refresh`` (seconds between reloads, 2 to 3600; empty: none)."""
    value = int_field({"refresh": raw}, "refresh", "refresh", minimum=2)
    if value is not None and value > 3600:
        raise InputError(f"refresh must be at most 3600 seconds, got {value}")
    return value


def topic_name(raw: str) -> str:
    """A topic name as Kafka takes it (:data:`TOPIC_NAME`), stripped."""
    name = raw.strip()
    if not name:
        raise InputError("topic: give a name")
    if name in (".", "..") or not TOPIC_NAME.fullmatch(name):
        raise InputError(
            f"topic: {name!r} is not a valid name (letters, digits, '.', '_', '-'; "
            "at most 249 characters)"
        )
    return name


def pairs(text: str, what: str) -> list[tuple[str, str]]:
    """``name=value`` (or ``name: value``) lines; blank lines skipped."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        sep = "=" if "=" in line else ":" if ":" in line else None
        if sep is None:
            raise InputError(f"{what}, line {n}: write name=value, got {line!r}")
        name, _, value = line.partition(sep)
        if not name.strip():
            raise InputError(f"{what}, line {n}: the name is empty")
        out.append((name.strip(), value.strip()))
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class NewTopicForm:
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


def parse_new_topic_form(form: Mapping[str, str]) -> NewTopicForm:
    """The create-topic form: name, partitions and replication factor (blank: the
    broker's default, -1) and configs as ``name=value`` lines."""
    name = topic_name(form.get("name", ""))
    partitions = int_field(form, "partitions", "partitions", minimum=1)
    factor = int_field(form, "replication_factor", "replication factor", minimum=1)
    configs = dict(pairs(form.get("configs", ""), "configs"))
    return NewTopicForm(
        name, -1 if partitions is None else partitions, -1 if factor is None else factor, configs
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ProduceForm:
    topic: str
    partition: int | None
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


def parse_produce_form(topic: str, form: Mapping[str, str]) -> ProduceForm:
    """The produce form: partition (blank: the partitioner's choice), key (blank:
    null), value, headers as ``name=value`` lines. Text is sent as UTF-8."""
    partition = int_field(form, "partition", "partition")
    key = form.get("key", "")
    headers = tuple((n, v.encode()) for n, v in pairs(form.get("headers", ""), "headers"))
    return ProduceForm(
        topic_name(topic),
        partition,
        key.encode() if key else None,
        form.get("value", "").encode(),
        headers,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigChange:
    """A change of a topic's configs: values to set, and names to reset to
    their default (the override removed)."""

    topic: str
    changes: dict[str, str | None]


def parse_config_form(topic: str, form: Mapping[str, str], resets: Iterable[str]) -> ConfigChange:
    """The configs form: ``set`` as ``name=value`` lines, and the names to reset
    (``resets``, the checked boxes). A name both set and reset is refused."""
    changes: dict[str, str | None] = dict(pairs(form.get("set", ""), "set"))
    for name in resets:
        name = name.strip()
        if not name:
            continue
        if name in changes:
            raise InputError(f"{name}: set and reset at once; pick one")
        changes[name] = None
    if not changes:
        raise InputError("set: give name=value lines, or tick configs to reset")
    return ConfigChange(topic, changes)


def parse_partition_count(topic: str, form: Mapping[str, str], now: int) -> int:
    """The new partition count of the add-partitions form: more than ``now``
    (Kafka adds partitions and never removes them)."""
    count = int_field(form, "count", "count", minimum=1)
    if count is None:
        raise InputError("count: give the new number of partitions")
    if count <= now:
        raise InputError(
            f"count: {topic!r} has {now} partition{'s' if now != 1 else ''}; give more "
            "(Kafka cannot remove partitions)"
        )
    return count


@dataclasses.dataclass(frozen=True, slots=True)
class PurgeForm:
    """Delete the records of a topic (DeleteRecords): of one partition or all,
    before an offset (None: the high watermark, everything)."""

    topic: str
    partition: int | None
    before: int | None


def parse_purge_form(topic: str, form: Mapping[str, str]) -> PurgeForm:
    """The purge form: ``confirm`` must repeat the topic's name; ``partition``
    (empty: every one) and ``before`` (empty: everything)."""
    if form.get("confirm", "").strip() != topic:
        raise InputError(f"confirm: type the topic's name ({topic}) to delete its records")
    partition = int_field(form, "partition", "partition")
    before = int_field(form, "before", "before")
    return PurgeForm(topic, partition, before)
