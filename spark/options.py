"""Options of the Kafka data source, parsed and checked on the driver.

No pyspark here: this module turns the strings Spark hands a data source into
typed settings, so that a wrong option fails when the query is defined, with
a message naming it, rather than later inside an executor.

The option names are those of Spark's own Kafka connector (``subscribe``,
``startingOffsets``, ``kafka.bootstrap.servers``...), so a job moves between the
two by changing ``format("kafka")`` to ``format("trafka")``. Rules:

* Option names are case-insensitive, as everywhere in Spark.
* ``kafka.<key>`` options are client settings; the key must be one trafka's
  consumer (reading) or producer (writing) knows, in Kafka's dotted spelling.
  Settings the data source owns (group, offsets, deserializers) are refused.
* Exactly one of ``subscribe``, ``subscribePattern`` and ``assign`` says what
  to read.
* Offsets in JSON are ``{"topic": {"partition": offset}}``; -2 means the
  earliest offset and -1 the latest (the last stable offset under
  ``kafka.isolation.level=read_committed``).
* Any other option is an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..sdk.config import ConsumerConfig, ProducerConfig
from ..sdk.errors import ConfigError

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "ReadOptions",
    "WriteOptions",
    "include_headers",
    "parse_read_options",
    "parse_write_options",
]

EARLIEST = -2
LATEST = -1

# Client settings the data source decides itself.
_OWNED_READ = {
    "group.id": "the data source tracks offsets itself (checkpoints in streaming)",
    "auto.offset.reset": "use startingOffsets",
    "enable.auto.commit": "the data source never commits offsets to a group",
    "key.deserializer": "keys are returned as binary; cast them in the DataFrame",
    "value.deserializer": "values are returned as binary; cast them in the DataFrame",
    "group.instance.id": "the data source does not join a group",
}
_OWNED_WRITE = {
    "key.serializer": "the key column (string or binary) is written as bytes",
    "value.serializer": "the value column (string or binary) is written as bytes",
    "transactional.id": "the sink is at-least-once; see the Spark page of the docs",
}

_READ_KEYS = {
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "includeheaders",
    "failondataloss",
    "maxoffsetspertrigger",
    "minpartitions",
    "polltimeoutms",
}
# Spark adds checkpointLocation to a streaming write's options.
_WRITE_KEYS = {"topic", "checkpointlocation"}


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a read starts or ends, for each partition, in Spark's order of
    precedence: ``timestamp`` (ms, every partition), else the partition's entry
    in ``timestamps``, else its entry in ``per_partition``, else ``default``
    (EARLIEST or LATEST). A timestamp means the first offset whose record is at
    least that old, or the partition's end when there is none.
    """

    default: int
    per_partition: Mapping[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int | None = None
    timestamps: Mapping[tuple[str, int], int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What a read asks for (see the module docstring for the option names)."""

    client: Mapping[str, str]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()
    starting: OffsetSpec = OffsetSpec(EARLIEST)
    ending: OffsetSpec = OffsetSpec(LATEST)
    include_headers: bool = False
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    poll_timeout_ms: int = 120_000

    def consumer_config(self) -> ConsumerConfig:
        """The settings of the consumers that read (driver and executors)."""
        return ConsumerConfig.from_dict(
            {
                **self.client,
                "enable.auto.commit": "false",
                "allow.auto.create.topics": "false",  # reading never creates a topic
                # Offsets the plan names must exist; failOnDataLoss decides what a gap does.
                "auto.offset.reset": "none" if self.fail_on_data_loss else "earliest",
            }
        )


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """What a write needs: client settings and the default topic."""

    client: Mapping[str, str]
    topic: str | None = None

    def producer_config(self) -> ProducerConfig:
        return ProducerConfig.from_dict(dict(self.client))


def _split(options: Mapping[str, str], allowed: set[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Lower-cased data source options and the ``kafka.`` client settings."""
    own: dict[str, str] = {}
    client: dict[str, str] = {}
    for key, value in options.items():
        low = key.lower()
        if low.startswith("kafka."):
            client[low[len("kafka.") :]] = str(value)
        elif low in allowed:
            own[low] = str(value)
        else:
            raise ConfigError(f"unknown option {key!r} for the trafka data source")
    if not client.get("bootstrap.servers"):
        raise ConfigError("option 'kafka.bootstrap.servers' is required")
    return own, client


def _owned(client: Mapping[str, str], owned: Mapping[str, str]) -> None:
    for key in client:
        normal = key.replace("_", ".")
        if normal in owned:
            raise ConfigError(f"option 'kafka.{key}' is not supported: {owned[normal]}")


def _bool(name: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    low = value.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    raise ConfigError(f"option {name!r} must be true or false, not {value!r}")


def include_headers(value: str | None) -> bool:
    """The ``includeHeaders`` option (which decides the read's columns)."""
    return _bool("includeHeaders", value, False)


def _positive(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"option {name!r} must be an integer, not {value!r}") from None
    if number <= 0:
        raise ConfigError(f"option {name!r} must be positive, not {number}")
    return number


def _json(name: str, value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as e:
        raise ConfigError(f"option {name!r} is not valid JSON: {e}") from None


def _offsets(name: str, value: str | None, default: int, *, allow: tuple[int, ...]) -> OffsetSpec:
    if value is None:
        return OffsetSpec(default)
    word = value.strip().lower()
    if word in ("earliest", "latest"):
        spec = EARLIEST if word == "earliest" else LATEST
        if spec not in allow:
            raise ConfigError(f"option {name!r} cannot be {word!r} here")
        return OffsetSpec(spec)
    data = _json(name, value)
    if not isinstance(data, dict):
        raise ConfigError(f"option {name!r} must be earliest, latest or a JSON object")
    per: dict[tuple[str, int], int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise ConfigError(f"option {name!r}: topic {topic!r} must map partitions to offsets")
        for part, offset in parts.items():
            try:
                number = int(part)
            except ValueError:
                raise ConfigError(f"option {name!r}: {part!r} is not a partition number") from None
            if type(offset) is not int or offset < -2 or (offset < 0 and offset not in allow):
                raise ConfigError(f"option {name!r}: {offset!r} for {topic}-{part} is not allowed")
            per[(topic, number)] = offset
    return OffsetSpec(default, per)


def _timestamps(name: str, value: str | None) -> dict[tuple[str, int], int]:
    if value is None:
        return {}
    data = _json(name, value)
    if not isinstance(data, dict):
        raise ConfigError(f'option {name!r} must be like {{"topic": {{"0": 1700000000000}}}}')
    out: dict[tuple[str, int], int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise ConfigError(f"option {name!r}: topic {topic!r} must map partitions to timestamps")
        for part, ts in parts.items():
            try:
                number = int(part)
            except ValueError:
                raise ConfigError(f"option {name!r}: {part!r} is not a partition number") from None
            if type(ts) is not int or ts < 0:
                raise ConfigError(f"option {name!r}: {ts!r} for {topic}-{part} is not a timestamp")
            out[(topic, number)] = ts
    return out


def _timestamp(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        ms = int(value)
    except ValueError:
        raise ConfigError(f"option {name!r} must be milliseconds since the epoch") from None
    if ms < 0:
        raise ConfigError(f"option {name!r} must not be negative")
    return ms


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check a read's options.

    Args:
        options: the options given to ``spark.read`` / ``spark.readStream``.
        streaming: whether this is a streaming read (its defaults differ: a stream
            starts at the latest offsets, and has no end).

    Raises:
        ConfigError: an unknown or invalid option, naming it.
    """
    own, client = _split(options, _READ_KEYS)
    _owned(client, _OWNED_READ)
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in own]
    if len(chosen) != 1:
        raise ConfigError("exactly one of 'subscribe', 'subscribePattern' and 'assign' is required")
    topics: tuple[str, ...] = ()
    pattern = None
    assigned: tuple[tuple[str, int], ...] = ()
    if "subscribe" in own:
        topics = tuple(t.strip() for t in own["subscribe"].split(",") if t.strip())
        if not topics:
            raise ConfigError("option 'subscribe' names no topic")
    elif "subscribepattern" in own:
        pattern = own["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as e:
            raise ConfigError(f"option 'subscribePattern' is not a valid pattern: {e}") from None
    else:
        data = _json("assign", own["assign"])
        if not isinstance(data, dict) or not data:
            raise ConfigError("option 'assign' must be like {\"topic\": [0, 1]}")
        pairs: list[tuple[str, int]] = []
        for topic, parts in data.items():
            if not isinstance(parts, list) or not all(type(p) is int and p >= 0 for p in parts):
                raise ConfigError(f"option 'assign': topic {topic!r} needs a list of partitions")
            pairs.extend((topic, p) for p in parts)
        assigned = tuple(sorted(set(pairs)))

    if streaming and own.keys() & {"endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"}:
        raise ConfigError("a streaming read has no end: 'endingOffsets' is for batch reads")
    if not streaming and "maxoffsetspertrigger" in own:
        raise ConfigError("option 'maxOffsetsPerTrigger' is for streaming reads")
    starting = _offsets(
        "startingOffsets",
        own.get("startingoffsets"),
        LATEST if streaming else EARLIEST,
        allow=(EARLIEST, LATEST) if streaming else (EARLIEST,),
    )
    ending = _offsets("endingOffsets", own.get("endingoffsets"), LATEST, allow=(LATEST,))
    starting = OffsetSpec(
        starting.default,
        starting.per_partition,
        _timestamp("startingTimestamp", own.get("startingtimestamp")),
        _timestamps("startingOffsetsByTimestamp", own.get("startingoffsetsbytimestamp")),
    )
    ending = OffsetSpec(
        ending.default,
        ending.per_partition,
        _timestamp("endingTimestamp", own.get("endingtimestamp")),
        _timestamps("endingOffsetsByTimestamp", own.get("endingoffsetsbytimestamp")),
    )

    result = ReadOptions(
        client=client,
        topics=topics,
        pattern=pattern,
        assigned=assigned,
        starting=starting,
        ending=ending,
        include_headers=include_headers(own.get("includeheaders")),
        fail_on_data_loss=_bool("failOnDataLoss", own.get("failondataloss"), True),
        max_offsets_per_trigger=_positive("maxOffsetsPerTrigger", own.get("maxoffsetspertrigger")),
        min_partitions=_positive("minPartitions", own.get("minpartitions")),
        poll_timeout_ms=_positive("pollTimeoutMs", own.get("polltimeoutms")) or 120_000,
    )
    result.consumer_config()  # an unknown or invalid kafka.* setting fails here
    return result


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Check a write's options (``topic``, ``kafka.*``).

    Raises:
        ConfigError: an unknown or invalid option, naming it.
    """
    own, client = _split(options, _WRITE_KEYS)
    _owned(client, _OWNED_WRITE)
    result = WriteOptions(client=client, topic=own.get("topic") or None)
    result.producer_config()
    return result
