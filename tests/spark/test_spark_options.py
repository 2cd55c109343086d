"""The data source's options and offset planning, without Spark."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trafka.sdk.errors import ConfigError
from trafka.spark._kafka import DataLossError, limit_offsets, plan_ranges
from trafka.spark.options import (
    EARLIEST,
    LATEST,
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


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "t", "subscribeTopics": "x"}, False, "'subscribeTopics'"),
        ({"subscribe": "t", "kafka.no.such.key": "1"}, False, "'no.such.key'"),
        ({"subscribe": "t", "kafka.group.id": "g"}, False, "kafka.group.id"),
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
        ({"subscribe": "t", "startingOffsets": '{"t": {"0": -1}}'}, False, "not allowed"),
        ({"subscribe": "t", "startingOffsets": '{"t": {"x": 1}}'}, False, "not a partition"),
        ({"subscribe": "t", "startingOffsets": '{"t": {"0": "1"}}'}, False, "not allowed"),
        ({"subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'}, False, "not allowed"),
        ({"subscribe": "t", "endingOffsets": "earliest"}, False, "cannot be 'earliest'"),
        ({"subscribe": "t", "endingOffsets": "latest"}, True, "has no end"),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "10"}, False, "streaming reads"),
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


def test_plan_reports_an_end_before_the_start() -> None:
    start = {"t": {"0": 50}}
    end = {"t": {"0": 20}}
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        plan_ranges(start, end, min_partitions=None, fail_on_data_loss=True)
    assert plan_ranges(start, end, min_partitions=None, fail_on_data_loss=False) == []
