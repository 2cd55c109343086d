"""The data source's options and offset planning, without Spark."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trafka.sdk.errors import ConfigError
from trafka.spark._kafka import (
    DataLossError,
    OffsetRange,
    limit_offsets,
    merge_ranges,
    plan_ranges,
)
from trafka.spark.options import (
    EARLIEST,
    EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS,
    LATEST,
    check_read_options,
    parse_read_options,
    parse_write_options,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_names_are_case_insensitive_and_kafka_settings_pass_through() -> None:
    opts = parse_read_options(
        {
            "KAFKA.BOOTSTRAP.SERVERS": "h:1",
            "Subscribe": "a, b",
            "kafka.isolation.level": "read_committed",
            "kafka.fetch.max.wait.ms": "50",
            "includeHeaders": "TRUE",
        },
        streaming=False,
    )
    assert opts.topics == ("a", "b")
    assert opts.include_headers
    config = opts.consumer_config()
    assert config.read_committed and config.fetch_max_wait_ms == 50
    assert not config.enable_auto_commit
    assert config.bootstrap_servers == ("h:1",)


def test_defaults_differ_between_batch_and_stream() -> None:
    batch = parse_read_options({**BASE, "subscribe": "t"}, streaming=False)
    stream = parse_read_options({**BASE, "subscribe": "t"}, streaming=True)
    assert (batch.starting.default, batch.ending.default) == (EARLIEST, LATEST)
    assert stream.starting.default == LATEST
    # A stream lists its partitions at every trigger unless told to keep them.
    assert stream.partitions_every_trigger
    kept = {**BASE, "subscribe": "t", "partitionDiscovery": "MetadataMaxAge"}
    assert not parse_read_options(kept, streaming=True).partitions_every_trigger


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "t", "subscribeTopics": "x"}, False, "'subscribeTopics'"),
        ({"subscribe": "t", "kafka.no.such.key": "1"}, False, "'no.such.key'"),
        ({"subscribe": "t", "kafka.interceptor.classes": "x.Y"}, False, "kafka.interceptor"),
        ({"subscribe": "t", "kafka.ssl.truststore.location": "x"}, False, "kafka.ssl.ca.location"),
        ({"subscribe": "t", "groupIdPrefix": " "}, False, "'groupIdPrefix'"),
        ({"subscribe": "t", "maxTriggerDelay": "soon"}, True, "'maxTriggerDelay'"),
        ({"subscribe": "t", "minOffsetsPerTrigger": "-1"}, True, "'minOffsetsPerTrigger'"),
        ({"subscribe": "t", "maxRecordsPerPartition": "0"}, False, "'maxRecordsPerPartition'"),
        ({"subscribe": "t", "fetchOffset.numRetries": "x"}, False, "'fetchOffset.numRetries'"),
        ({"subscribe": "t", "fetchOffset.retryIntervalMs": "-1"}, False, "retryIntervalMs"),
        ({"subscribe": "t", "kafkaConsumer.pollTimeoutMs": "0"}, False, "pollTimeoutMs"),
        (
            {"subscribe": "t", "kafkaConsumer.pollTimeoutMs": "1", "pollTimeoutMs": "1"},
            False,
            "not both",
        ),
        ({"subscribe": "t", "startingOffsetsByTimestampStrategy": "x"}, False, "Strategy"),
        ({"subscribe": "t", "partitionDiscovery": "never"}, True, "'partitionDiscovery'"),
        ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, False, "startingOffsets"),
        ({"subscribe": "t", "kafka.value.deserializer": "x"}, False, "binary"),
        ({}, False, "exactly one of"),
        ({"subscribe": "t", "assign": '{"t": [0]}'}, False, "exactly one of"),
        ({"subscribe": " , "}, False, "names no topic"),
        ({"subscribePattern": "(unclosed"}, False, "not a valid pattern"),
        ({"assign": "[1, 2]"}, False, "must be like"),
        ({"assign": '{"t": [-1]}'}, False, "list of partitions"),
        ({"assign": "{bad json"}, False, "not valid JSON"),
        ({"subscribe": "t", "startingOffsets": "latest"}, False, "cannot be 'latest'"),
        ({"subscribe": "t", "startingOffsets": '{"t": {"0": -1}}'}, False, r"-1 \(latest\)"),
        ({"subscribe": "t", "startingOffsets": '{"t": {"x": 1}}'}, False, "not a partition"),
        ({"subscribe": "t", "startingOffsets": '{"t": {"0": "1"}}'}, False, "not allowed"),
        ({"subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'}, False, r"-2 \(earliest\)"),
        ({"subscribe": "t", "endingOffsets": "earliest"}, False, "cannot be 'earliest'"),
        ({"subscribe": "t", "endingOffsets": "latest"}, True, "'endingOffsets' is for batch"),
        ({"subscribe": "t", "endingTimestamp": "1"}, True, "'endingTimestamp' is for batch"),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "ten"}, False, "maxOffsetsPerTrigger"),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "0"}, True, "positive"),
        ({"subscribe": "t", "minPartitions": "many"}, False, "an integer"),
        ({"subscribe": "t", "includeHeaders": "yes"}, False, "true or false"),
        ({"subscribe": "t", "startingTimestamp": "-5"}, False, "negative"),
        ({"subscribe": "t", "kafka.fetch.max.wait.ms": "soon"}, False, "fetch"),
        ({"subscribe": "t", "startingOffsetsByTimestamp": "[1]"}, False, "must be like"),
        ({"subscribe": "t", "startingOffsetsByTimestamp": '{"t": 5}'}, False, "map partitions"),
        ({"subscribe": "t", "endingOffsetsByTimestamp": '{"t": {"0": -1}}'}, False, "timestamp"),
        ({"subscribe": "t", "endingOffsetsByTimestamp": '{"t": {"0": 1}}'}, True, "has no end"),
    ],
)
def test_bad_read_options_are_refused_by_name(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_read_options({**BASE, **options}, streaming=streaming)


def test_bootstrap_servers_are_required() -> None:
    with pytest.raises(ConfigError, match=r"kafka\.bootstrap\.servers"):
        parse_read_options({"subscribe": "t"}, streaming=False)
    with pytest.raises(ConfigError, match=r"kafka\.bootstrap\.servers"):
        parse_write_options({"topic": "t"})


def test_offsets_json_and_timestamps() -> None:
    opts = parse_read_options(
        {
            **BASE,
            "assign": '{"a": [1, 0, 1], "b": [2]}',
            "startingOffsets": '{"a": {"0": 5, "1": -2}}',
            "endingOffsets": '{"a": {"0": 9}}',
            "startingTimestamp": "1000",
        },
        streaming=False,
    )
    assert opts.assigned == (("a", 0), ("a", 1), ("b", 2))
    assert dict(opts.starting.per_partition) == {("a", 0): 5, ("a", 1): EARLIEST}
    assert opts.starting.timestamp == 1000
    assert dict(opts.ending.per_partition) == {("a", 0): 9}


def test_write_options() -> None:
    opts = parse_write_options({**BASE, "topic": "out", "kafka.linger.ms": "3"})
    assert opts.topic == "out" and opts.producer_config().linger_ms == 3
    for key in ("kafka.value.serializer", "kafka.transactional.id"):
        with pytest.raises(ConfigError, match=key):
            parse_write_options({**BASE, key: "x"})
    with pytest.raises(ConfigError, match="'subscribe'"):
        parse_write_options({**BASE, "subscribe": "t"})
    with pytest.raises(ConfigError, match="includeHeaders"):
        parse_write_options({**BASE, "includeHeaders": "maybe"})
    assert not opts.exactly_once and opts.producer_config().transactional_id is None


def test_exactly_once_options() -> None:
    opts = parse_write_options(
        {**BASE, "deliveryGuarantee": "Exactly-Once", "transactionalIdPrefix": " orders "}
    )
    assert opts.exactly_once and opts.transactional_id_prefix == "orders"
    config = opts.producer_config("orders-3")
    assert config.transactional_id == "orders-3"
    # Long enough for a micro-batch and a restart (Kafka's transaction.max.timeout.ms).
    assert config.transaction_timeout_ms == EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS == 900_000
    given = parse_write_options(
        {**BASE, "deliveryGuarantee": "exactly-once", "kafka.transaction.timeout.ms": "60000"}
    )
    assert given.producer_config("x-0").transaction_timeout_ms == 60_000
    with pytest.raises(ConfigError, match="deliveryGuarantee"):
        parse_write_options({**BASE, "deliveryGuarantee": "exactly_twice"})
    with pytest.raises(ConfigError, match="needs deliveryGuarantee=exactly-once"):
        parse_write_options({**BASE, "transactionalIdPrefix": "orders"})
    with pytest.raises(ConfigError, match="cannot be empty"):
        parse_write_options(
            {**BASE, "deliveryGuarantee": "exactly-once", "transactionalIdPrefix": " "}
        )
    with pytest.raises(ConfigError, match=r"kafka\.transactional\.id.*transactionalIdPrefix"):
        parse_write_options(
            {**BASE, "deliveryGuarantee": "exactly-once", "kafka.transactional.id": "x"}
        )


def test_partitioner_class_takes_java_names_and_trafka_names() -> None:
    java = "org.apache.kafka.clients.producer.RoundRobinPartitioner"
    config = parse_write_options({**BASE, "kafka.partitioner.class": java}).producer_config()
    assert config.partitioner == "roundrobin"
    default = "org.apache.kafka.clients.producer.internals.DefaultPartitioner"
    config = parse_write_options({**BASE, "kafka.partitioner.class": default}).producer_config()
    assert config.partitioner == "murmur2"
    config = parse_write_options({**BASE, "kafka.partitioner.class": "crc32"}).producer_config()
    assert config.partitioner == "crc32"
    with pytest.raises(ConfigError, match=r"kafka\.partitioner\.class.*com\.acme\.Mine"):
        parse_write_options({**BASE, "kafka.partitioner.class": "com.acme.Mine"})


def test_java_only_client_settings_are_accepted_and_left_out() -> None:
    opts = parse_read_options(
        {
            **BASE,
            "subscribe": "t",
            "kafka.receive.buffer.bytes": "65536",
            "kafka.client.dns.lookup": "use_all_dns_ips",
            "kafka.fetch.min.bytes": "7",
        },
        streaming=False,
    )
    config = opts.consumer_config()
    assert config.fetch_min_bytes == 7
    assert "receive.buffer.bytes" not in config.to_dict()
    write = parse_write_options({**BASE, "kafka.send.buffer.bytes": "1", "kafka.linger.ms": "2"})
    assert write.producer_config().linger_ms == 2
    # A typo is still an error, as the rest of trafka's configuration.
    with pytest.raises(ConfigError, match=r"receive\.bufer\.bytes"):
        parse_read_options(
            {**BASE, "subscribe": "t", "kafka.receive.bufer.bytes": "1"}, streaming=False
        )


def test_partition_eof_is_refused_for_reads() -> None:
    # The consumer takes librdkafka's enable.partition.eof; a read has no use
    # for its events (they are no rows): it ends where its offsets say.
    with pytest.raises(ConfigError, match=r"kafka\.enable\.partition\.eof.*endingOffsets"):
        parse_read_options(
            {**BASE, "subscribe": "t", "kafka.enable.partition.eof": "true"}, streaming=False
        )


def test_group_id_is_given_or_generated_from_the_prefix() -> None:
    given = parse_read_options({**BASE, "subscribe": "t", "kafka.group.id": "etl"}, streaming=True)
    assert given.group_id == "etl" and given.consumer_config().group_id == "etl"
    assert not given.consumer_config().enable_auto_commit
    # kafka.group.id wins over groupIdPrefix, as in Spark.
    both = {**BASE, "subscribe": "t", "kafka.group.id": "etl", "groupIdPrefix": "p"}
    assert parse_read_options(both, streaming=False).group_id == "etl"
    made = parse_read_options({**BASE, "subscribe": "t", "groupIdPrefix": "jobs"}, streaming=False)
    assert made.group_id is not None and made.group_id.startswith("jobs-")
    default = parse_read_options({**BASE, "subscribe": "t"}, streaming=False)
    assert default.group_id is not None and default.group_id.startswith("spark-kafka-source-")
    assert (
        default.group_id != parse_read_options({**BASE, "subscribe": "t"}, streaming=False).group_id
    )


def test_spark_defaults_and_batch_ignores_trigger_options() -> None:
    batch = parse_read_options(
        {**BASE, "subscribe": "t", "maxOffsetsPerTrigger": "10", "minOffsetsPerTrigger": "5"},
        streaming=False,
    )
    assert batch.max_offsets_per_trigger is None and batch.min_offsets_per_trigger is None
    stream = parse_read_options(
        {
            **BASE,
            "subscribe": "t",
            "maxOffsetsPerTrigger": "10",
            "minOffsetsPerTrigger": "5",
            "maxTriggerDelay": "30s",
            "kafkaConsumer.pollTimeoutMs": "700",
            "fetchOffset.numRetries": "0",
            "fetchOffset.retryIntervalMs": "25",
            "startingOffsetsByTimestampStrategy": "LATEST",
        },
        streaming=True,
    )
    assert (stream.max_offsets_per_trigger, stream.min_offsets_per_trigger) == (10, 5)
    assert stream.max_trigger_delay_ms == 30_000 and stream.poll_timeout_ms == 700
    assert (stream.fetch_offset_retries, stream.fetch_offset_retry_interval_ms) == (0, 25)
    assert stream.starting.no_match_latest
    plain = parse_read_options({**BASE, "subscribe": "t", "pollTimeoutMs": "9"}, streaming=True)
    assert plain.max_trigger_delay_ms == 15 * 60_000 and plain.poll_timeout_ms == 9
    assert (plain.fetch_offset_retries, plain.fetch_offset_retry_interval_ms) == (3, 10)
    assert not plain.starting.no_match_latest
    for text, ms in (("500ms", 500), ("2m", 120_000), ("1h", 3_600_000), ("250", 250)):
        opts = parse_read_options(
            {**BASE, "subscribe": "t", "maxTriggerDelay": text}, streaming=True
        )
        assert opts.max_trigger_delay_ms == ms


def test_options_wrong_for_both_kinds_of_read_fail_before_spark_says_which() -> None:
    with pytest.raises(ConfigError, match="'subscrib'"):
        check_read_options({**BASE, "subscrib": "t"})
    with pytest.raises(ConfigError, match="maxOffsetsPerTrigger"):
        check_read_options({**BASE, "subscribe": "t", "maxOffsetsPerTrigger": "0"})
    # An end at the earliest offset: a batch read refuses it, a stream any end.
    with pytest.raises(ConfigError, match=r"'endingOffsets': -2 \(earliest\) for t-0"):
        check_read_options({**BASE, "subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'})
    # Wrong for one kind only: left to reader() or streamReader().
    check_read_options({**BASE, "subscribe": "t", "startingOffsets": "latest"})
    check_read_options({**BASE, "subscribe": "t", "startingOffsets": '{"t": {"0": -1}}'})
    check_read_options({**BASE, "subscribe": "t", "endingOffsets": "latest"})


lags = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 5)),
    st.tuples(st.integers(0, 1000), st.integers(0, 1000)),
    min_size=1,
)


def _offsets(values: dict[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, p), o in values.items():
        out.setdefault(topic, {})[str(p)] = o
    return out


@given(lags, st.integers(1, 3000))
def test_rate_limit_shares_exactly_the_limit(
    parts: dict[tuple[str, int], tuple[int, int]], limit: int
) -> None:
    start = {tp: s for tp, (s, _) in parts.items()}
    latest = {tp: s + n for tp, (s, n) in parts.items()}
    end = limit_offsets(_offsets(start), _offsets(latest), limit)
    moved = {tp: end[tp[0]][str(tp[1])] - start[tp] for tp in parts}
    total = sum(n for _, n in parts.values())
    assert sum(moved.values()) == min(limit, total)
    assert all(0 <= moved[tp] <= parts[tp][1] for tp in parts)
    lagging = [tp for tp, (_, n) in parts.items() if n]
    if limit >= len(lagging):
        assert all(moved[tp] > 0 for tp in lagging)


def test_plan_splits_ranges_for_min_partitions_without_gaps() -> None:
    start = {"t": {"0": 0, "1": 100, "2": 7}}
    end = {"t": {"0": 10, "1": 400, "2": 7}}
    plain = plan_ranges(start, end, min_partitions=None, fail_on_data_loss=True)
    assert [(r.partition, r.start, r.end) for r in plain] == [(0, 0, 10), (1, 100, 400)]
    split = plan_ranges(start, end, min_partitions=8, fail_on_data_loss=True)
    assert len(split) >= 8
    for p, (lo, hi) in ((0, (0, 10)), (1, (100, 400))):
        pieces = sorted((r.start, r.end) for r in split if r.partition == p)
        assert pieces[0][0] == lo and pieces[-1][1] == hi
        assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
        assert all(e > s for s, e in pieces)


def test_plan_max_records_per_partition_then_min_partitions() -> None:
    start = {"t": {"0": 0, "1": 0}}
    end = {"t": {"0": 1000, "1": 10}}
    ranges = plan_ranges(
        start, end, min_partitions=None, fail_on_data_loss=True, max_records_per_partition=300
    )
    assert [(r.partition, r.start, r.end) for r in ranges] == [
        (0, 0, 250), (0, 250, 500), (0, 500, 750), (0, 750, 1000), (1, 0, 10),
    ]  # fmt: skip
    # minPartitions asks for more: the larger partition is split further.
    more = plan_ranges(
        start, end, min_partitions=10, fail_on_data_loss=True, max_records_per_partition=300
    )
    assert len(more) >= 10 and all(r.end - r.start <= 300 for r in more)
    assert sorted((r.start, r.end) for r in more if r.partition == 1) == [(0, 10)]
    # Fewer asked than maxRecordsPerPartition gives: no change.
    assert (
        plan_ranges(
            start, end, min_partitions=3, fail_on_data_loss=True, max_records_per_partition=300
        )
        == ranges
    )


def test_plan_reports_an_end_before_the_start() -> None:
    start = {"t": {"0": 50}}
    end = {"t": {"0": 20}}
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        plan_ranges(start, end, min_partitions=None, fail_on_data_loss=True)
    assert plan_ranges(start, end, min_partitions=None, fail_on_data_loss=False) == []


def _sizes(tasks: list[tuple[OffsetRange, ...]]) -> list[int]:
    return [sum(r.end - r.start for r in task) for task in tasks]


def test_merge_keeps_one_task_per_range_when_there_are_few() -> None:
    ranges = [OffsetRange("t", p, 0, 10) for p in range(4)]
    assert merge_ranges(ranges, None) == [(r,) for r in ranges]
    assert merge_ranges(ranges, 4) == [(r,) for r in ranges]
    assert merge_ranges([], 2) == []


def test_merge_makes_even_tasks_and_leaves_a_large_range_alone() -> None:
    ranges = [OffsetRange("t", p, 0, 100) for p in range(16)]
    tasks = merge_ranges(ranges, 2)
    assert _sizes(tasks) == [800, 800]
    key = lambda r: (r.topic, r.partition, r.start)  # noqa: E731
    assert sorted((r for task in tasks for r in task), key=key) == ranges
    for task in tasks:
        assert list(task) == sorted(task, key=key)
    skewed = [OffsetRange("t", 0, 0, 1000), *(OffsetRange("t", p, 0, 10) for p in range(1, 5))]
    assert merge_ranges(skewed, 2) == [(skewed[0],), tuple(skewed[1:])]


def test_merge_never_passes_max_records_per_partition() -> None:
    ranges = plan_ranges(
        {"t": {"0": 0, "1": 0, "2": 0}},
        {"t": {"0": 100, "1": 30, "2": 30}},
        min_partitions=None,
        fail_on_data_loss=True,
        max_records_per_partition=50,
    )
    tasks = merge_ranges(ranges, 2, max_records_per_partition=50)
    # 50 + 50 + 30 + 30: two tasks cannot hold them within 50 each.
    assert sorted(_sizes(tasks)) == [30, 30, 50, 50]


def test_merge_joins_the_pieces_of_a_partition_that_meet() -> None:
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 0, 10, 20), OffsetRange("t", 1, 0, 100)]
    assert merge_ranges(ranges, 2) == [
        (OffsetRange("t", 0, 0, 20),),
        (OffsetRange("t", 1, 0, 100),),
    ]


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 500), st.integers(1, 500)), max_size=40),
    st.integers(1, 8),
    st.one_of(st.none(), st.integers(1, 600)),
)
def test_merge_reads_every_planned_offset_once(
    spec: list[tuple[int, int, int]], tasks: int, cap: int | None
) -> None:
    # Ranges as plan_ranges makes them: disjoint, within the cap when there is one.
    ranges = []
    for i, (topic, start, n) in enumerate(spec):
        n = n if cap is None else min(n, cap)
        ranges.append(OffsetRange(f"t{topic}", i, start, start + n))
    merged = merge_ranges(ranges, tasks, max_records_per_partition=cap)
    offsets = [
        (r.topic, r.partition, o) for task in merged for r in task for o in range(r.start, r.end)
    ]
    assert sorted(offsets) == sorted(
        (r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end)
    )
    if cap is None:
        assert len(merged) == min(len(ranges), tasks)
    else:
        assert all(size <= cap for size in _sizes(merged))
        assert len(merged) >= min(len(ranges), tasks)


def test_tasks_aim_at_the_cores_never_below_min_partitions() -> None:
    from trafka.spark.source import KafkaDataSource

    def tasks(parallelism: int | None, **options: str) -> int | None:
        source = KafkaDataSource({**BASE, "subscribe": "t", **options})
        source.parallelism = parallelism
        return source._tasks(parse_read_options(source.options, streaming=False))

    assert tasks(2) == 2
    assert tasks(2, minPartitions="7") == 7
    assert tasks(2, mergedPartitions="5") == 5
    assert tasks(2, mergeOffsetRanges="false") is None
    assert tasks(None, mergedPartitions="3") == 3
    with pytest.raises(ConfigError, match="'mergeOffsetRanges'"):
        tasks(2, mergeOffsetRanges="sometimes")


def test_the_parity_table_in_the_docs_is_the_options_module() -> None:
    """docs/spark.md shows :data:`PARITY` as rendered; every option in it is
    accepted, by each side it names, and no option is accepted that it leaves out."""
    from pathlib import Path

    from trafka.spark import options

    docs = (Path(__file__).parents[2] / "docs" / "spark.md").read_text()
    begin, end = "<!-- parity:begin -->\n", "<!-- parity:end -->"
    assert begin in docs and end in docs, "docs/spark.md lost its parity markers"
    shown = docs[docs.index(begin) + len(begin) : docs.index(end)]
    assert shown == options.parity_table(), "regenerate with trafka.spark.options.parity_table()"

    read_keys: set[str] = set()
    write_keys: set[str] = set()
    for row in options.PARITY:
        if row.example is None:
            continue
        source = (
            {"subscribe": "t"}
            if row.name not in ("subscribe", "subscribePattern", "assign")
            else {}
        )
        if row.side in ("read", "both"):
            read_keys.add(row.name.lower())
            for streaming in (False, True):
                given = {**BASE, **source, row.name: row.example}
                if streaming and row.name.lower().startswith("ending"):
                    with pytest.raises(ConfigError, match="no end"):
                        parse_read_options(given, streaming=True)
                    continue
                parse_read_options(given, streaming=streaming)
        if row.side in ("write", "both"):
            write_keys.add(row.name.lower())
            # The prefix is an option of the exactly-once sink only.
            needs = (
                {"deliveryGuarantee": "exactly-once"} if row.name == "transactionalIdPrefix" else {}
            )
            parse_write_options({**BASE, **needs, row.name: row.example})
    # Every data source option the parsers take has its row (kafka.* aside).
    assert {k for k in options._READ_KEYS} - {"polltimeoutms"} == {
        k for k in read_keys if not k.startswith("kafka.")
    }
    assert options._WRITE_KEYS - {"checkpointlocation"} == {
        k for k in write_keys if not k.startswith("kafka.")
    }


@pytest.mark.parametrize(("retries", "fails", "attempts"), [(3, 2, 3), (0, 1, 1), (1, 5, 2)])
def test_offsets_are_asked_for_again_as_fetch_offset_options_say(
    retries: int, fails: int, attempts: int
) -> None:
    from trafka.sdk.errors import KafkaConnectionError
    from trafka.spark import _kafka

    opts = parse_read_options(
        {
            **BASE,
            "subscribe": "t",
            "fetchOffset.numRetries": str(retries),
            "fetchOffset.retryIntervalMs": "1",
        },
        streaming=False,
    )
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls <= fails:
            raise KafkaConnectionError("broker down")
        return "offsets"

    if fails > retries:
        with pytest.raises(KafkaConnectionError):
            _kafka._retried(opts, lambda: _kafka._run(flaky))
    else:
        assert _kafka._retried(opts, lambda: _kafka._run(flaky)) == "offsets"
    assert calls == attempts

    # What cannot pass is not asked again.
    calls = 0

    async def missing() -> None:
        nonlocal calls
        calls += 1
        raise _kafka.PlanningError("topics do not exist: t")

    with pytest.raises(_kafka.PlanningError):
        _kafka._retried(opts, lambda: _kafka._run(missing))
    assert calls == 1


def test_a_small_micro_batch_is_one_task_unless_the_tasks_were_chosen() -> None:
    from trafka.spark.source import SMALL_TASK_OFFSETS, KafkaDataSource, _plan

    start = {"t": {str(p): 100 for p in range(4)}}

    def plan(per_partition: int, **options: str) -> list[list[tuple[int, int, int]]]:
        source = KafkaDataSource({**BASE, "subscribe": "t", **options})
        source.parallelism = 2  # the session's cores
        opts = parse_read_options(source.options, streaming=True)
        end = {"t": {str(p): 100 + per_partition for p in range(4)}}
        partitions = _plan(opts, source._tasks(opts), start, end, small_task=SMALL_TASK_OFFSETS)
        return [[(r.partition, r.start, r.end) for r in p.ranges] for p in partitions]  # type: ignore[attr-defined]

    every = [(p, 100, 103) for p in range(4)]
    # 12 offsets in 4 partitions: one task reads each range, exactly.
    assert plan(3) == [every]
    # Enough offsets for two tasks of the small size: the cores' two.
    big = SMALL_TASK_OFFSETS // 2 + 1
    assert len(plan(big)) == 2
    assert sorted(r for task in plan(big) for r in task) == [(p, 100, 100 + big) for p in range(4)]
    # The tasks someone chose are kept.
    assert len(plan(3, mergeOffsetRanges="false")) == 4
    assert len(plan(3, mergedPartitions="3")) == 3
    assert len(plan(3, minPartitions="4")) == 4
