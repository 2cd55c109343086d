"""Options of the Kafka data source, parsed and checked on the driver.

No pyspark here: this module turns the strings Spark hands a data source into
typed settings, so that a wrong option fails when the query is defined, with
a message naming it, rather than later inside an executor.

The option names are those of Spark's own Kafka connector (``subscribe``,
``startingOffsets``, ``kafka.bootstrap.servers``...), so a job moves between the
two by changing ``format("kafka")`` to ``format("trafka")``. Rules:

* Option names are case-insensitive, as everywhere in Spark.
* ``kafka.<key>`` options are client settings, passed through to trafka's
  consumer (reading) or producer (writing) in Kafka's dotted spelling. A Java
  client setting trafka has no use for (``receive.buffer.bytes``,
  ``client.dns.lookup``...) is accepted and left out, as :data:`JAVA_ONLY` says
  why; any other unknown key is an error naming it (a typo is not silently
  dropped, as Java's clients would). Settings the data source owns (offsets,
  deserializers, interceptors) are refused, as Spark's connector refuses them.
* ``kafka.group.id`` (else ``groupIdPrefix`` and a random suffix) is the group
  id the consumers present, for the brokers' quotas and ACLs; they never join
  the group or commit to it.
* Exactly one of ``subscribe``, ``subscribePattern`` and ``assign`` says what
  to read.
* Offsets in JSON are ``{"topic": {"partition": offset}}``; -2 means the
  earliest offset and -1 the latest (the last stable offset under
  ``kafka.isolation.level=read_committed``).
* Any other option is an error.
* :data:`PARITY` lists every option and behaviour of Spark's Kafka integration
  guide with what trafka does; docs/spark.md's parity table is rendered from it
  (:func:`parity_table`) and a test keeps the two equal.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..sdk.config import ConsumerConfig, ProducerConfig
from ..sdk.errors import ConfigError
from ..sdk.partitioners import PARTITIONERS

__all__ = [
    "EARLIEST",
    "JAVA_ONLY",
    "LATEST",
    "PARITY",
    "OffsetSpec",
    "Parity",
    "ReadOptions",
    "EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS",
    "WriteOptions",
    "check_read_options",
    "include_headers",
    "parity_table",
    "parse_read_options",
    "parse_write_options",
]

EARLIEST = -2
LATEST = -1

# Client settings the data source decides itself (Spark's connector refuses the same).
_OWNED_READ = {
    "auto.offset.reset": "use startingOffsets",
    "enable.auto.commit": "the data source never commits offsets to a group",
    "key.deserializer": "keys are returned as binary; cast them in the DataFrame",
    "value.deserializer": "values are returned as binary; cast them in the DataFrame",
    "group.instance.id": "the data source does not join a group",
    "interceptor.classes": "records go to Spark as they are read (Spark refuses it too)",
}
_OWNED_WRITE = {
    "key.serializer": "the key column (string or binary) is written as bytes",
    "value.serializer": "the value column (string or binary) is written as bytes",
    "transactional.id": "the sink derives its transactional ids itself; give "
    "deliveryGuarantee=exactly-once (and transactionalIdPrefix)",
    "interceptor.classes": "rows are produced as they are (Spark refuses it too)",
}

#: Java client settings that mean nothing to trafka's clients: accepted under
#: ``kafka.`` (so a job moves over unchanged) and left out, with why.
JAVA_ONLY: dict[str, str] = {
    "client.dns.lookup": "trafka resolves a host name itself and tries each of its addresses",
    "receive.buffer.bytes": "the operating system's socket buffer sizes are used",
    "send.buffer.bytes": "the operating system's socket buffer sizes are used",
    "socket.connection.setup.timeout.max.ms": "socket.connection.setup.timeout.ms bounds a connect",
    "metadata.recovery.strategy": "trafka goes back to bootstrap.servers when no broker answers",
    "metadata.recovery.rebootstrap.trigger.ms": "see metadata.recovery.strategy",
    "metric.reporters": "Java metrics reporters; trafka's metrics are in statistics()",
    "metrics.num.samples": "Java metrics; trafka's are in statistics()",
    "metrics.sample.window.ms": "Java metrics; trafka's are in statistics()",
    "metrics.recording.level": "Java metrics; trafka's are in statistics()",
    "auto.include.jmx.reporter": "there is no JMX in Python",
    "security.providers": "Python's ssl module provides the security",
    "ssl.protocol": "Python's ssl module negotiates the newest TLS both sides speak",
    "ssl.enabled.protocols": "Python's ssl module negotiates the newest TLS both sides speak",
    "ssl.provider": "Python's ssl module provides TLS",
    "ssl.cipher.suites": "OpenSSL's default suites are used",
    "ssl.keymanager.algorithm": "a Java KeyManagerFactory setting",
    "ssl.trustmanager.algorithm": "a Java TrustManagerFactory setting",
    "ssl.secure.random.implementation": "a Java SecureRandom setting",
    "ssl.engine.factory.class": "a Java class",
    "sasl.client.callback.handler.class": "a Java class",
    "sasl.login.class": "a Java class",
    "sasl.login.callback.handler.class": "a Java class",
    "sasl.login.refresh.window.factor": "trafka re-authenticates between 85% and 95% of a session",
    "sasl.login.refresh.window.jitter": "trafka re-authenticates between 85% and 95% of a session",
    "sasl.login.refresh.min.period.seconds": "see sasl.login.refresh.window.factor",
    "sasl.login.refresh.buffer.seconds": "see sasl.login.refresh.window.factor",
    "sasl.login.connect.timeout.ms": "request.timeout.ms bounds the token endpoint",
    "sasl.login.read.timeout.ms": "request.timeout.ms bounds the token endpoint",
    "sasl.login.retry.backoff.ms": "retry.backoff.ms applies",
    "sasl.login.retry.backoff.max.ms": "retry.backoff.max.ms applies",
    "partitioner.ignore.keys": "use kafka.partitioner.class",
    "partitioner.adaptive.partitioning.enable": "the sticky partitioner is not adaptive",
    "partitioner.availability.timeout.ms": "partitions without a leader are always avoided",
    "compression.gzip.level": "use kafka.compression.level",
    "compression.lz4.level": "use kafka.compression.level",
    "compression.zstd.level": "use kafka.compression.level",
    "metadata.max.idle.ms": "metadata.max.age.ms bounds how long metadata is kept",
}

# Java settings that would change what is read or trusted: refused, not dropped.
_JAVA_REFUSED = {
    "ssl.keystore.location": "give the PEM files as kafka.ssl.certificate.location and "
    "kafka.ssl.key.location",
    "ssl.truststore.location": "give the PEM CA file as kafka.ssl.ca.location",
    "ssl.keystore.type": "give the PEM files as kafka.ssl.certificate.location and "
    "kafka.ssl.key.location",
    "ssl.truststore.type": "give the PEM CA file as kafka.ssl.ca.location",
    # librdkafka's; a read ends at the offsets planned, and an end-of-partition
    # event is no row.
    "enable.partition.eof": "a read ends at its planned offsets (endingOffsets)",
}

#: ``kafka.partitioner.class``: Java's partitioners by class name, and trafka's own by name.
JAVA_PARTITIONERS = {
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner": "murmur2",
    "org.apache.kafka.clients.producer.RoundRobinPartitioner": "roundrobin",
    "org.apache.kafka.clients.producer.UniformStickyPartitioner": "random",
}

_SPARK_GROUP_PREFIX = "spark-kafka-source"

# Data source options, lower-cased, and how each is parsed (see parse_read_options).
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
    "startingoffsetsbytimestampstrategy",
    "includeheaders",
    "failondataloss",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "latestoffsetwaitms",
    "minpartitions",
    "maxrecordsperpartition",
    "mergeoffsetranges",
    "mergedpartitions",
    "streamreader",
    "partitiondiscovery",
    "kafkaconsumer.polltimeoutms",
    "polltimeoutms",  # trafka's name before kafkaConsumer.pollTimeoutMs
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "groupidprefix",
}
# The options that end a read (a batch read's only), as the guide spells them.
_ENDING = {
    "endingoffsets": "endingOffsets",
    "endingtimestamp": "endingTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
}
# Spark adds checkpointLocation to a streaming write's options.
_WRITE_KEYS = {
    "topic",
    "checkpointlocation",
    "includeheaders",
    "deliveryguarantee",
    "transactionalidprefix",
}

#: ``transaction.timeout.ms`` of the exactly-once sink unless ``kafka.transaction.timeout.ms``
#: says otherwise: Kafka's default ``transaction.max.timeout.ms`` (15 minutes), the
#: longest a broker takes by default. A transaction stays open from a task's
#: first record to the driver's commit, and across a restart of a query whose
#: driver died in between; Java's producer default (60 s) is too short for that.
EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS = 900_000


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a read starts or ends, for each partition, in Spark's order of
    precedence: ``timestamp`` (ms, every partition), else the partition's entry
    in ``timestamps``, else its entry in ``per_partition``, else ``default``
    (EARLIEST or LATEST). A timestamp means the first offset whose record is at
    least that old; when there is none, an end is the partition's end, and a
    start is an error, or the partition's end with ``no_match_latest``
    (``startingOffsetsByTimestampStrategy=latest``).
    """

    default: int
    per_partition: Mapping[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int | None = None
    timestamps: Mapping[tuple[str, int], int] = field(default_factory=dict)
    no_match_latest: bool = True


def _client_settings(client: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` settings trafka's clients take (Java-only ones left out)."""
    out = {}
    for key, value in client.items():
        normal = key.replace("_", ".")
        if normal in _JAVA_REFUSED:
            raise ConfigError(f"option 'kafka.{key}' is not supported: {_JAVA_REFUSED[normal]}")
        if normal not in JAVA_ONLY:
            out[key] = value
    return out


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
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    latest_offset_wait_ms: int = 100
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    merge_ranges: bool = True
    merged_partitions: int | None = None
    simple_stream_reader: bool = False
    partitions_every_trigger: bool = True
    poll_timeout_ms: int = 120_000
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    group_id: str | None = None

    def consumer_config(self) -> ConsumerConfig:
        """The settings of the consumers that read (driver and executors)."""
        settings: dict[str, Any] = {
            **_client_settings(self.client),
            "enable.auto.commit": "false",
            "allow.auto.create.topics": "false",  # reading never creates a topic
            # Offsets the plan names must exist; failOnDataLoss decides what a gap does.
            "auto.offset.reset": "none" if self.fail_on_data_loss else "earliest",
        }
        settings.pop("group.id", None)
        settings.pop("group_id", None)
        if self.group_id is not None:
            settings["group.id"] = self.group_id
        return ConsumerConfig.from_dict(settings)


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """What a write needs: client settings and the default topic.

    Attributes:
        exactly_once: ``deliveryGuarantee=exactly-once``: every task writes in a
            Kafka transaction that the driver commits (see :mod:`._eos`).
        transactional_id_prefix: ``transactionalIdPrefix``; None: the sink
            derives one (from the checkpoint location, for a stream).
        checkpoint: ``checkpointLocation``, which Spark adds to a stream's options.
    """

    client: Mapping[str, str]
    topic: str | None = None
    exactly_once: bool = False
    transactional_id_prefix: str | None = None
    checkpoint: str | None = None

    def producer_config(self, transactional_id: str | None = None) -> ProducerConfig:
        """The producers' settings; with ``transactional_id``, a transactional
        producer's (``transaction.timeout.ms`` defaulting to
        :data:`EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS`)."""
        settings: dict[str, Any] = _client_settings(self.client)
        for key in ("partitioner.class", "partitioner_class"):
            if key in settings:
                settings["partitioner"] = _partitioner(settings.pop(key))
        if transactional_id is not None:
            settings["transactional.id"] = transactional_id
            if not {"transaction.timeout.ms", "transaction_timeout_ms"} & settings.keys():
                settings["transaction.timeout.ms"] = EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS
        return ProducerConfig.from_dict(settings)


def _partitioner(value: str) -> str:
    name = value.strip()
    if name in JAVA_PARTITIONERS:
        return JAVA_PARTITIONERS[name]
    if name in PARTITIONERS:
        return name
    raise ConfigError(
        f"option 'kafka.partitioner.class' cannot be {value!r}: Java classes cannot run in "
        f"Python; use one of {', '.join(sorted(JAVA_PARTITIONERS))} or trafka's "
        f"{', '.join(sorted(PARTITIONERS))}"
    )


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


def _integer(name: str, value: str | None, minimum: int) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"option {name!r} must be an integer, not {value!r}") from None
    if number < minimum:
        what = "positive" if minimum == 1 else f"at least {minimum}"
        raise ConfigError(f"option {name!r} must be {what}, not {number}")
    return number


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _positive(name: str, value: str | None) -> int | None:
    return _integer(name, value, 1)


_UNITS_MS = {
    "us": 0.001, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000,
    "h": 3_600_000, "d": 86_400_000,
}  # fmt: skip


def _duration_ms(name: str, value: str | None, default: int) -> int:
    """A duration as Spark writes them (``15m``, ``30s``, ``500ms``; a bare number is ms)."""
    if value is None:
        return default
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", value.lower())
    if match is None or match[2] not in ("", *_UNITS_MS):
        raise ConfigError(
            f"option {name!r} must be a duration such as 15m, 30s or 500ms, not {value!r}"
        )
    return int(int(match[1]) * _UNITS_MS.get(match[2], 1))


def _json(name: str, value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as e:
        raise ConfigError(f"option {name!r} is not valid JSON: {e}") from None


# Why an offset cannot be a start or an end, as Spark's Kafka connector rules
# (its integration guide: startingOffsets "latest" is not allowed for batch
# queries; endingOffsets "earliest" is not allowed; endingOffsets is for batch
# queries only).
_REFUSED = {
    ("startingOffsets", LATEST): "a batch read starting at the latest offset would read "
    "nothing (Spark's Kafka connector refuses it too); use earliest, offsets in JSON or "
    "startingTimestamp",
    ("endingOffsets", EARLIEST): "a read ending at the earliest offset would read nothing "
    "(Spark's Kafka connector refuses it too); use latest, offsets in JSON or endingTimestamp",
}
_WORDS = {EARLIEST: "earliest", LATEST: "latest"}


def _offsets(name: str, value: str | None, default: int, *, allow: tuple[int, ...]) -> OffsetSpec:
    if value is None:
        return OffsetSpec(default)
    word = value.strip().lower()
    if word in ("earliest", "latest"):
        spec = EARLIEST if word == "earliest" else LATEST
        if spec not in allow:
            raise ConfigError(f"option {name!r} cannot be {word!r}: {_REFUSED[(name, spec)]}")
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
            if type(offset) is not int or offset < -2:
                raise ConfigError(
                    f"option {name!r}: {offset!r} for {topic}-{part} is not allowed: give an "
                    "offset, -2 (earliest) or -1 (latest)"
                )
            if offset < 0 and offset not in allow:
                raise ConfigError(
                    f"option {name!r}: {offset} ({_WORDS[offset]}) for {topic}-{part} is not "
                    f"allowed: {_REFUSED[(name, offset)]}"
                )
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


def _strategy(value: str | None) -> bool:
    """``startingOffsetsByTimestampStrategy``: True for ``latest``, False for ``error``."""
    if value is None:
        return False
    low = value.strip().lower()
    if low not in ("error", "latest"):
        raise ConfigError(
            f"option 'startingOffsetsByTimestampStrategy' must be error or latest, not {value!r}"
        )
    return low == "latest"


def _group_id(own: Mapping[str, str], client: Mapping[str, str]) -> str:
    """``kafka.group.id`` as given, else ``groupIdPrefix`` and a random suffix (as Spark)."""
    given = client.get("group.id") or client.get("group_id")
    if given:
        return given
    prefix = own.get("groupidprefix", _SPARK_GROUP_PREFIX)
    if not prefix.strip():
        raise ConfigError("option 'groupIdPrefix' must not be empty")
    return f"{prefix}-{uuid.uuid4()}"


def _source(
    own: Mapping[str, str],
) -> tuple[tuple[str, ...], str | None, tuple[tuple[str, int], ...]]:
    """What a read takes records from: ``(topics, pattern, assigned partitions)``,
    exactly one of ``subscribe``, ``subscribePattern`` and ``assign`` given."""
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
    return topics, pattern, assigned


def _offset_range(own: Mapping[str, str], streaming: bool) -> tuple[OffsetSpec, OffsetSpec]:
    """Where a read starts and ends, by offsets or timestamps (a stream starts at
    the latest offsets by default, and gives no end)."""
    no_match_latest = _strategy(own.get("startingoffsetsbytimestampstrategy"))
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
        no_match_latest,
    )
    ending = OffsetSpec(
        ending.default,
        ending.per_partition,
        _timestamp("endingTimestamp", own.get("endingtimestamp")),
        _timestamps("endingOffsetsByTimestamp", own.get("endingoffsetsbytimestamp")),
    )
    return starting, ending


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
    topics, pattern, assigned = _source(own)

    ends = [name for key, name in _ENDING.items() if key in own]
    if streaming and ends:
        raise ConfigError(
            f"option {ends[0]!r} is for batch reads only: a stream has no end (Spark's Kafka "
            "connector refuses it too)"
        )
    if "polltimeoutms" in own and "kafkaconsumer.polltimeoutms" in own:
        raise ConfigError("give 'kafkaConsumer.pollTimeoutMs' or 'pollTimeoutMs', not both")
    starting, ending = _offset_range(own, streaming)
    # Spark ignores the trigger options in a batch read; they are still checked.
    max_per_trigger = _positive("maxOffsetsPerTrigger", own.get("maxoffsetspertrigger"))
    min_per_trigger = _positive("minOffsetsPerTrigger", own.get("minoffsetspertrigger"))
    poll = own.get("kafkaconsumer.polltimeoutms", own.get("polltimeoutms"))
    result = ReadOptions(
        client=client,
        topics=topics,
        pattern=pattern,
        assigned=assigned,
        starting=starting,
        ending=ending,
        include_headers=include_headers(own.get("includeheaders")),
        fail_on_data_loss=_bool("failOnDataLoss", own.get("failondataloss"), True),
        max_offsets_per_trigger=max_per_trigger if streaming else None,
        min_offsets_per_trigger=min_per_trigger if streaming else None,
        max_trigger_delay_ms=_duration_ms(
            "maxTriggerDelay", own.get("maxtriggerdelay"), 15 * 60_000
        ),
        latest_offset_wait_ms=_or(
            _integer("latestOffsetWaitMs", own.get("latestoffsetwaitms"), 0), 100
        ),
        min_partitions=_positive("minPartitions", own.get("minpartitions")),
        max_records_per_partition=_positive(
            "maxRecordsPerPartition", own.get("maxrecordsperpartition")
        ),
        merge_ranges=_bool("mergeOffsetRanges", own.get("mergeoffsetranges"), True),
        merged_partitions=_positive("mergedPartitions", own.get("mergedpartitions")),
        simple_stream_reader=_stream_reader(own.get("streamreader")),
        partitions_every_trigger=_partition_discovery(own.get("partitiondiscovery")),
        poll_timeout_ms=_positive("kafkaConsumer.pollTimeoutMs", poll) or 120_000,
        fetch_offset_retries=_or(
            _integer("fetchOffset.numRetries", own.get("fetchoffset.numretries"), 0), 3
        ),
        fetch_offset_retry_interval_ms=_or(
            _integer("fetchOffset.retryIntervalMs", own.get("fetchoffset.retryintervalms"), 0), 10
        ),
        group_id=_group_id(own, client),
    )
    result.consumer_config()  # an unknown or invalid kafka.* setting fails here
    return result


def _stream_reader(value: str | None) -> bool:
    """``streamReader``: whether a stream reads on the driver (``simple``) or in
    tasks (``partitioned``, the default)."""
    kind = (value or "partitioned").strip().lower()
    if kind not in ("partitioned", "simple"):
        raise ConfigError(f"option 'streamReader' must be 'partitioned' or 'simple', not {value!r}")
    return kind == "simple"


def _partition_discovery(value: str | None) -> bool:
    """``partitionDiscovery``: ``trigger`` (default) lists per trigger; ``metadataMaxAge`` keeps."""
    kind = (value or "trigger").strip().lower()
    if kind not in ("trigger", "metadatamaxage"):
        raise ConfigError(
            f"option 'partitionDiscovery' must be 'trigger' or 'metadataMaxAge', not {value!r}"
        )
    return kind == "trigger"


def check_read_options(options: Mapping[str, str]) -> None:
    """Check a read's options before Spark says whether it is a batch or a stream
    (a data source's ``schema()``): what is wrong for both fails now.

    Raises:
        ConfigError: an option neither a batch read nor a stream accepts.
    """
    try:
        parse_read_options(options, streaming=False)
    except ConfigError:
        try:
            parse_read_options(options, streaming=True)
        except ConfigError:
            pass
        else:
            return  # only a batch read refuses it: reader() says so
        raise


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Check a write's options (``topic``, ``includeHeaders``, ``deliveryGuarantee``,
    ``transactionalIdPrefix``, ``kafka.*``).

    Raises:
        ConfigError: an unknown or invalid option, naming it.
    """
    own, client = _split(options, _WRITE_KEYS)
    _owned(client, _OWNED_WRITE)
    # As in Spark, a headers column is written whether or not includeHeaders is set.
    include_headers(own.get("includeheaders"))
    guarantee = own.get("deliveryguarantee", "at-least-once").strip().lower()
    if guarantee not in ("at-least-once", "exactly-once"):
        raise ConfigError(
            f"option 'deliveryGuarantee' must be at-least-once or exactly-once, not "
            f"{own['deliveryguarantee']!r}"
        )
    prefix = own.get("transactionalidprefix")
    if prefix is not None and not prefix.strip():
        raise ConfigError("option 'transactionalIdPrefix' cannot be empty")
    if prefix is not None and guarantee != "exactly-once":
        raise ConfigError("option 'transactionalIdPrefix' needs deliveryGuarantee=exactly-once")
    result = WriteOptions(
        client=client,
        topic=own.get("topic") or None,
        exactly_once=guarantee == "exactly-once",
        transactional_id_prefix=prefix.strip() if prefix is not None else None,
        checkpoint=own.get("checkpointlocation") or None,
    )
    result.producer_config("check" if result.exactly_once else None)
    return result


@dataclass(frozen=True, slots=True)
class Parity:
    """One option or behaviour of Spark's Kafka integration guide, and trafka's answer.

    Attributes:
        name: the option (as the guide spells it) or a short name for a behaviour.
        side: ``read``, ``write`` or ``both``.
        spark: what Spark's connector does (its default, in short).
        trafka: ``same``, or what differs and why.
        example: a value the option takes (None for a behaviour); the parity test
            gives it to the parser of each side.
        streaming_only: the option means something only in a stream (a batch read
            accepts and ignores it, as Spark does).
    """

    name: str
    side: str
    spark: str
    trafka: str = "same"
    example: str | None = None
    streaming_only: bool = False


_GUIDE = "Spark's Kafka integration guide"

#: Every option and behaviour of Spark's Kafka integration guide (Spark 3.5-4.x).
PARITY: tuple[Parity, ...] = (
    Parity("assign", "read", 'JSON {"topic": [0, 1]}', example='{"t": [0]}'),
    Parity("subscribe", "read", "comma-separated topics", example="t"),
    Parity(
        "subscribePattern",
        "read",
        "Java regular expression",
        "a Python regular expression, matched against whole topic names",
        example="t.*",
    ),
    Parity("kafka.bootstrap.servers", "both", "required", example="127.0.0.1:9092"),
    Parity(
        "startingTimestamp",
        "read",
        "ms; each partition starts at its first record at or after it",
        example="1700000000000",
    ),
    Parity(
        "startingOffsetsByTimestamp",
        "read",
        "the same per partition, JSON",
        example='{"t": {"0": 1700000000000}}',
    ),
    Parity(
        "startingOffsets",
        "read",
        "earliest (batch), latest (stream), or JSON with -2/-1",
        example="earliest",
    ),
    Parity("endingTimestamp", "read", "batch only; ms", example="1700000000000"),
    Parity("endingOffsetsByTimestamp", "read", "batch only; JSON", example='{"t": {"0": 1}}'),
    Parity("endingOffsets", "read", "batch only; latest or JSON with -1", example="latest"),
    Parity("failOnDataLoss", "read", "true", example="false"),
    Parity(
        "kafkaConsumer.pollTimeoutMs",
        "read",
        "120000 ms",
        "same; `pollTimeoutMs` is accepted too",
        example="5000",
    ),
    Parity("fetchOffset.numRetries", "read", "3", example="5"),
    Parity("fetchOffset.retryIntervalMs", "read", "10 ms", example="20"),
    Parity(
        "maxOffsetsPerTrigger",
        "read",
        "none; ignored by batch reads; each partition gets the floor of its share of the "
        "limit in proportion to its backlog (a share under 1 rounds up to 1)",
        "the same records over the stream, micro-batches cut differently: trafka's take "
        "exactly the limit (each partition with a backlog gets one offset, the rest in "
        "proportion, remainders to the largest fractions), where the connector's floors run "
        "short of it by up to one offset per partition",
        example="1000",
        streaming_only=True,
    ),
    Parity(
        "minOffsetsPerTrigger",
        "read",
        "none; ignored by batch reads",
        example="100",
        streaming_only=True,
    ),
    Parity(
        "maxTriggerDelay",
        "read",
        "15m, with minOffsetsPerTrigger",
        example="30s",
        streaming_only=True,
    ),
    Parity(
        "latestOffsetWaitMs",
        "read",
        "not in Spark: a trigger asks once",
        "trafka's own, default 100 ms: a stream's trigger that finds nothing new waits that "
        "long at the brokers for a record (0: not at all)",
        example="250",
        streaming_only=True,
    ),
    Parity("minPartitions", "read", "none: one task per partition", example="8"),
    Parity("maxRecordsPerPartition", "read", "none", example="10000"),
    Parity(
        "mergeOffsetRanges",
        "read",
        "not in Spark: one task per partition's range",
        "trafka's own, default true: small ranges of several partitions share a task, about "
        "one task per core (Spark's default parallelism); false plans as Spark does",
        example="false",
    ),
    Parity(
        "mergedPartitions",
        "read",
        "not in Spark",
        "trafka's own: how many tasks merged ranges aim at, instead of Spark's default parallelism",
        example="4",
    ),
    Parity(
        "streamReader",
        "read",
        "not in Spark: executor tasks read each micro-batch",
        "trafka's own, default partitioned (tasks read); simple: the driver reads a "
        "micro-batch as it finds it (PySpark's simple stream reader), no read task, for "
        "small rates where latency matters (see Latency)",
        example="simple",
        streaming_only=True,
    ),
    Parity(
        "new partitions and topics",
        "read",
        "a stream lists the subscribed topics' partitions (and the topics a pattern matches) "
        "at every trigger: new ones are read from their earliest offset in the next "
        "micro-batch",
        "same (one Metadata request per trigger on the planner's kept connection); "
        "partitionDiscovery=metadataMaxAge keeps the list between triggers",
    ),
    Parity(
        "records gone (failOnDataLoss)",
        "read",
        "true fails a stream's micro-batch as it is planned when a partition new to it starts "
        "past offset 0, one it read is gone, or one's end went back before its position (the "
        "topic created again), and a task whose records were deleted; false logs and goes on",
        "same, at the same moments, naming the offsets gone; but a batch read starting past a "
        "partition's end fails its task in the connector whatever failOnDataLoss says: trafka's "
        "fails as it is planned (true) or reads nothing of the partition (false)",
    ),
    Parity(
        "partitionDiscovery",
        "read",
        "not in Spark: every trigger lists the partitions",
        "trafka's own, default trigger (as Spark); metadataMaxAge: a stream keeps its "
        "partition list between triggers and lists them again after kafka.metadata.max.age.ms "
        "(5 minutes) or a failed lookup, saving a Metadata request per trigger (a fraction of "
        "a millisecond) at the cost of reading partitions and topics added meanwhile up to "
        "that late",
        example="metadataMaxAge",
        streaming_only=True,
    ),
    Parity(
        "groupIdPrefix",
        "read",
        "spark-kafka-source",
        "same: the group id the consumers present; they never join or commit",
        example="etl",
    ),
    Parity(
        "kafka.group.id",
        "read",
        "none: a generated id",
        "same: presented for quotas and ACLs; never joined or committed to",
        example="etl-group",
    ),
    Parity(
        "includeHeaders", "both", "false; the sink writes a headers column anyway", example="true"
    ),
    Parity(
        "startingOffsetsByTimestampStrategy",
        "read",
        "error: a timestamp no record reaches fails the query; latest: start at the end",
        example="latest",
    ),
    Parity("topic", "write", "the topic of every row; overrides a topic column", example="t"),
    Parity(
        "deliveryGuarantee",
        "write",
        "not in Spark: the sink is at-least-once",
        "trafka's own, default at-least-once; exactly-once writes each task's rows in a Kafka "
        "transaction that the driver commits, for read_committed readers",
        example="exactly-once",
    ),
    Parity(
        "transactionalIdPrefix",
        "write",
        "not in Spark",
        "trafka's own, with deliveryGuarantee=exactly-once: transactional ids are the prefix "
        "and the Spark partition id; by default derived from the checkpoint location (streams) "
        "or drawn at random (batch writes)",
        example="orders-sink",
    ),
    Parity(
        "kafka.partitioner.class",
        "write",
        "the producer's partitioner (Java class)",
        "Java's DefaultPartitioner, RoundRobinPartitioner and UniformStickyPartitioner "
        "(keys ignored, spread at random) by class name, or trafka's partitioners by name; "
        "other Java classes cannot run in Python",
        example="org.apache.kafka.clients.producer.RoundRobinPartitioner",
    ),
    Parity(
        "kafka.* client settings",
        "both",
        "passed to the Java consumer or producer",
        "passed to trafka's; Java-only ones (kafka.receive.buffer.bytes, "
        "kafka.client.dns.lookup, ...) accepted with no effect; unknown ones are an error",
    ),
    Parity(
        "refused kafka.* settings",
        "both",
        "auto.offset.reset, enable.auto.commit, (de)serializers, interceptor.classes",
        "same, and kafka.transactional.id on the sink; kafka.ssl.keystore/truststore.* "
        "(JKS) refused in favour of PEM files",
    ),
    Parity(
        "errors at definition",
        "both",
        "a wrong option fails load() or start()",
        "same, but for what only one kind of read refuses (startingOffsets=latest or -1 on a "
        "batch read, endingOffsets on a stream): Spark asks a Python source at load() for its "
        "schema alone, alike for both kinds, and makes a stream's reader after start() "
        "returns, so these fail as a batch read is planned (its first action) or as the "
        "stream starts, naming the option",
    ),
    Parity(
        "missing topics",
        "read",
        "a topic that does not exist fails the planning (UnknownTopicOrPartitionException "
        "from its admin client); an assigned partition that does not exist, of a topic that "
        "does, is left out: it reads as empty",
        "the same for topics (the error names them; the data source never creates topics); "
        "an assigned partition that does not exist fails the planning too, naming it, so a "
        "mistyped assign is not read as empty",
    ),
    Parity(
        "JSON naming some partitions",
        "read",
        "startingOffsets, endingOffsets and starting/endingOffsetsByTimestamp in JSON must "
        "name every partition the read assigns, or the planning fails",
        "partitions the JSON leaves out take the option's default (earliest, latest), so "
        "one JSON keeps working for a topic that grew; what the connector takes, trafka "
        "reads the same way",
    ),
    Parity("headers of a record without any", "read", "null (includeHeaders=true)"),
    Parity(
        "source metrics",
        "read",
        "avg/max/minOffsetsBehindLatest in a stream's progress",
        "not in the progress: in PySpark 4.3 a Python stream is a PythonMicroBatchStream, "
        "which does not implement ReportsSourceMetrics (Spark never asks it for metrics()), "
        "and the Python worker protocol has no call for them (only initialOffset, "
        "latestOffset, partitions, commit, prepareForTriggerAvailableNow, "
        "getDefaultReadLimit and reportLatestOffset); trafka.spark.offsets_behind_latest"
        "(query.lastProgress) computes the three from the latestOffset the source reports",
    ),
    Parity(
        "consumer and producer caching",
        "both",
        "spark.kafka.consumer.cache.* and producer cache (Spark settings)",
        "readers and producers (and their connections) kept per Python worker, keyed by "
        "the client settings without the group id (so queries share them), at most 8 idle "
        "readers and 32 idle sockets per worker, the least recently used closed first, and "
        "closed after 5 idle minutes; a stream's planning clients kept between triggers, "
        "a batch read's between queries (at most 4 idle); "
        "the spark.kafka.* cache settings do not apply",
    ),
    Parity(
        "delegation tokens",
        "both",
        "spark.kafka.clusters.* obtains tokens for the executors",
        "create the token on the driver and pass it as kafka.sasl.* options",
    ),
)


def parity_table() -> str:
    """:data:`PARITY` as the Markdown table docs/spark.md shows."""
    lines = ["| Option or behaviour | | Spark | trafka |", "|---|---|---|---|"]
    for p in PARITY:
        side = {"read": "read", "write": "write", "both": "read, write"}[p.side]
        name = f"`{p.name}`" if p.example is not None else p.name
        lines.append(f"| {name} | {side} | {p.spark} | {p.trafka} |")
    return "\n".join(lines) + "\n"
