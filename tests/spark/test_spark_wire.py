"""The executors' range reader over blocking sockets (no Spark): exact ranges,
connections kept between reads, deleted offsets reported as they are."""

from __future__ import annotations

import dataclasses

import pytest
from spark_helpers import create, fresh, produce, run

from trafka.brokerlite import RunningBroker
from trafka.sdk import TopicPartition, open_admin
from trafka.sdk.partitioners import murmur2_partition
from trafka.spark import _kafka
from trafka.spark._wire import RangeReader
from trafka.spark.options import parse_read_options

pytestmark = pytest.mark.timeout(60)


def _opts(broker: RunningBroker, topic: str, **options: str) -> _kafka.ReadOptions:
    return parse_read_options(
        {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic, **options},
        streaming=False,
    )


def _offsets(opts: _kafka.ReadOptions, partition: int, start: int, end: int) -> list[int]:
    task = _kafka.OffsetRange(opts.topics[0], partition, start, end)
    return [o for chunk in _kafka.read_range(opts, task) for o in chunk.offsets()]


def test_ranges_are_read_exactly_over_kept_connections(broker: RunningBroker) -> None:
    topic = fresh("wire")
    create(broker, topic, 2)
    produce(broker, topic, [(b"k", b"%d" % i, None) for i in range(3000)], batch_size=2048)
    opts = _opts(broker, topic)
    assert _offsets(opts, murmur2_partition(b"k", 2), 10, 2000) == list(range(10, 2000))
    reader = RangeReader(opts.consumer_config())
    tp = TopicPartition(topic, murmur2_partition(b"k", 2))
    try:
        for start, end in ((0, 1), (2999, 3000), (100, 1100), (5, 6)):
            got = [
                o
                for records, _ in reader.read(tp, start, end, 5000, 500)
                for o in records.offsets()
            ]
            # Whole batches come back; the reader's caller cuts at the end.
            assert [o for o in got if o < end] == list(range(start, end))
        assert reader.opened == 2  # the bootstrap connection, then the leader's, kept
    finally:
        reader.close()


def test_the_next_fetch_travels_while_a_chunk_is_handed_on(broker: RunningBroker) -> None:
    """While a fetched answer is decoded and its chunks handed on, the fetch
    after it is already on the wire (one per reader, and none once the range's
    last records are buffered); a read stopped with that fetch unanswered
    applies its answer, so the kept connection serves the next read exactly."""
    topic = fresh("wire-ahead")
    create(broker, topic, 1)
    produce(broker, topic, [(None, b"%04d" % i, None) for i in range(3000)], batch_size=1024)
    opts = _opts(broker, topic)
    # Small fetches: the range takes many of them.
    config = dataclasses.replace(opts.consumer_config(), max_partition_fetch_bytes=4096)
    reader = RangeReader(config)
    tp = TopicPartition(topic, 0)
    try:
        got: list[int] = []
        flying: list[int] = []
        for records, _ in reader.read(tp, 0, 2000, 5000, 10):
            got.extend(records.offsets())
            flying.append(reader.requests_in_flight)
        assert [o for o in got if o < 2000] == list(range(2000))
        assert max(flying) == 1  # one fetch ahead, never two
        assert flying[0] == 1  # sent before the first chunk was handed on
        assert flying[-1] == 0  # the range's end was buffered: nothing asked past it
        assert reader.requests_in_flight == 0

        reads = reader.read(tp, 0, 3000, 5000, 10)
        next(reads)
        assert reader.requests_in_flight == 1
        reads.close()  # Spark stopped reading
        assert reader.requests_in_flight == 0
        opened = reader.opened
        got = [
            o for records, _ in reader.read(tp, 1500, 2500, 5000, 500) for o in records.offsets()
        ]
        assert [o for o in got if o < 2500] == list(range(1500, 2500))
        assert reader.opened == opened  # the same connection
    finally:
        reader.close()


def test_deleted_offsets_are_named(broker: RunningBroker) -> None:
    topic = fresh("wire-loss")
    create(broker, topic, 1)
    produce(broker, topic, [(None, b"%d" % i, None) for i in range(100)])

    async def delete() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.delete_records({TopicPartition(topic, 0): 30})

    run(delete)
    with pytest.raises(_kafka.DataLossError, match=r"offsets 0-29 of \S+ are no longer in the log"):
        _offsets(_opts(broker, topic), 0, 0, 100)
    with pytest.raises(
        _kafka.DataLossError, match=r"offsets 10-19 of \S+ .* read of offsets 10-19"
    ):
        _offsets(_opts(broker, topic), 0, 10, 20)
    # failOnDataLoss=false: from the log's start on.
    assert _offsets(_opts(broker, topic, failOnDataLoss="false"), 0, 0, 100) == list(range(30, 100))


def test_offsets_past_the_logs_end_are_named_and_never_reread(broker: RunningBroker) -> None:
    """A planned range the log no longer reaches (a log truncated by a leader
    change, or a topic recreated with fewer records): with failOnDataLoss=true
    the error says the offsets are past the log's end, not that retention
    deleted them; with false nothing of the range is read, and above all the
    reader does not start again from the log's start (that would return the
    records of other ranges twice), as Spark's Kafka source skips to the end."""
    topic = fresh("wire-past")
    create(broker, topic, 1)
    produce(broker, topic, [(None, b"%d" % i, None) for i in range(100)])
    with pytest.raises(
        _kafka.DataLossError,
        match=r"offsets 120-149 of \S+ are past the end of the log its leader holds now",
    ):
        _offsets(_opts(broker, topic), 0, 120, 150)
    assert _offsets(_opts(broker, topic, failOnDataLoss="false"), 0, 120, 150) == []


def test_a_kept_reader_serves_other_topics_without_asking_for_metadata_again(
    broker: RunningBroker,
) -> None:
    """A pooled reader reads many topics: after each read its metadata answers
    for all of them, so the next fetch does not first ask again (and back off)."""
    import time

    topics = [fresh("wire-many") for _ in range(2)]
    for topic in topics:
        create(broker, topic, 1)
        produce(broker, topic, [(None, b"%d" % i, None) for i in range(50)])
    reader = RangeReader(_opts(broker, topics[0]).consumer_config())
    try:
        for topic in (*topics, topics[0]):
            got = [
                o
                for records, _ in reader.read(TopicPartition(topic, 0), 0, 50, 5000, 500)
                for o in records.offsets()
            ]
            assert got == list(range(50))
            assert not reader.metadata.needs_update(time.monotonic()), topic
    finally:
        reader.close()


def test_a_task_fetches_more_of_its_partition_unless_the_read_sets_it() -> None:
    """A task reads one partition at a time, so its reader's fetches may carry
    more of it than the consumer's default (``max.partition.fetch.bytes``,
    1 MiB, spread over many partitions); a read that sets the setting, in either
    spelling, keeps it, and ``fetch.max.bytes`` still bounds the whole fetch."""

    def fetch_bytes(**options: str) -> int:
        opts = parse_read_options(
            {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t", **options},
            streaming=False,
        )
        config = _kafka.reader_config(opts)
        # Pooled alike, whatever the query's group.
        assert config == _kafka.reader_config(dataclasses.replace(opts, group_id="another"))
        return config.max_partition_fetch_bytes

    default = parse_read_options(
        {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t"}, streaming=False
    ).consumer_config()
    assert fetch_bytes() > default.max_partition_fetch_bytes
    assert fetch_bytes() <= default.fetch_max_bytes
    assert fetch_bytes(**{"kafka.max.partition.fetch.bytes": "65536"}) == 65536
    assert fetch_bytes(**{"kafka.max_partition_fetch_bytes": "2097152"}) == 2097152
    assert fetch_bytes(**{"kafka.fetch.max.bytes": "3000000"}) == 3000000


def test_large_answers_are_received_in_pieces_and_read_exactly(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fetch answer of ``_JOIN_FROM`` bytes or more is received as the pieces
    the socket hands over (each of at most what the answer still lacks) and
    joined once; the records come back whole and in order."""
    from trafka.spark import _wire

    topic = fresh("wire-large")
    create(broker, topic, 1)
    values = [bytes([i % 251]) * 20_000 for i in range(120)]  # about 2.4 MB
    produce(broker, topic, [(None, v, None) for v in values], batch_size=100_000)
    wanted: list[int] = []
    original = _wire.ConnectionState.wanted

    def spy(self: object) -> int:
        n: int = original.fget(self)  # type: ignore[attr-defined]
        wanted.append(n)
        return n

    monkeypatch.setattr(_wire.ConnectionState, "wanted", property(spy))
    opts = _opts(broker, topic)
    task = _kafka.OffsetRange(topic, 0, 0, len(values))
    chunks = list(_kafka.read_range(opts, task))
    got = [row[3] for chunk in chunks for row in chunk.rows()]
    assert got == values
    # Some reads took the rest of a large answer as pieces.
    assert any(n > 0 for n in wanted)
