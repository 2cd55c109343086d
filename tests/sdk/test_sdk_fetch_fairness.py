"""Fetcher: partitions with data take turns being handed out (no sockets).

Java's consumer hands out its completed fetches in the order they arrived, one
after the other (``FetchCollector.collectFetch`` over ``FetchBuffer``'s queue,
up to ``max.poll.records`` a poll, going on to the next completed fetch within
the same poll), and fetches a partition again only once its buffered data is
used up (``AbstractFetch.fetchablePartitions`` leaves buffered partitions
out); a partition whose data was used up goes to the end
(``CompletedFetch.drain`` calls ``SubscriptionState.movePartitionToEnd``). So
a partition's next data comes after what the other partitions had buffered
meanwhile. trafka prefetches (the next data of a partition is on its way while
the current is taken): the prefetched data takes its turn when it becomes the
partition's current data, behind the data already waiting, as Java's next
fetch would.
"""

from __future__ import annotations

from sdk_metadata import one_topic_cache

from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.records import encode_batch, set_base_offset
from trafka.sdk.fetcher import Fetcher, TopicPartition

R = fetch.FetchResponse
TPS = [TopicPartition("t", p) for p in range(3)]


def batch(base: int, n: int) -> bytes:
    raw = encode_batch([(1000 + i, None, b"v%d" % (base + i), ()) for i in range(n)])
    return bytes(set_base_offset(raw, base))


def answer(f: Fetcher, n: int) -> list[int]:
    """Fetch every fetchable partition; each answers ``n`` records from where it
    was asked. Returns the partitions in the answer's order (the request's,
    which rotates, KIP-74)."""
    [tps] = f.fetchable().values()
    _, positions = f.build_fetch(tps, 12)
    response = R(
        responses=[
            R.FetchableTopicResponse(
                topic="t",
                partitions=[
                    R.PartitionData(
                        partition_index=tp.partition,
                        high_watermark=10_000,
                        records=batch(offset, n),
                    )
                    for tp, offset in positions.items()
                ],
            )
        ]
    )
    assert f.handle_fetch_response(positions, response)
    return [tp.partition for tp in positions]


def taken(f: Fetcher, limit: int) -> list[tuple[int, int, int]]:
    """One poll of at most ``limit``: (partition, first offset, last offset) per partition."""
    return [(tp.partition, recs[0].offset, recs[-1].offset) for tp, recs in f.take(limit).items()]


def fetcher() -> Fetcher:
    f = Fetcher(one_topic_cache("t", 3))
    f.assign(TPS)
    for tp in TPS:
        f.seek(tp, 0)
    return f


def test_a_partitions_prefetched_data_waits_behind_the_others() -> None:
    f = fetcher()
    a, b, c = answer(f, 20)  # every partition: offsets 0-19, in the answer's order
    answer(f, 20)  # and prefetched: 20-39
    polls = [taken(f, 10) for _ in range(12)]
    assert polls == [
        [(a, 0, 9)],
        [(a, 10, 19)],
        [(b, 0, 9)],
        [(b, 10, 19)],
        [(c, 0, 9)],
        [(c, 10, 19)],
        [(a, 20, 29)],
        [(a, 30, 39)],
        [(b, 20, 29)],
        [(b, 30, 39)],
        [(c, 20, 29)],
        [(c, 30, 39)],
    ]


def test_a_poll_goes_on_to_the_next_partitions_data() -> None:
    f = fetcher()
    a, b, c = answer(f, 20)
    answer(f, 20)
    assert taken(f, 25) == [(a, 0, 19), (b, 0, 4)]
    assert taken(f, 25) == [(b, 5, 19), (c, 0, 9)]
    assert taken(f, 25) == [(c, 10, 19), (a, 20, 34)]
    # A poll large enough for the rest takes them in turn.
    assert taken(f, 100) == [(a, 35, 39), (b, 20, 39), (c, 20, 39)]


def test_data_arriving_for_an_idle_partition_waits_its_turn() -> None:
    f = fetcher()
    [tps] = f.fetchable().values()
    _, positions = f.build_fetch(tps, 12)
    # Partition 0 had nothing yet; 1 and 2 answered 20 records each.
    parts = [
        R.PartitionData(
            partition_index=tp.partition,
            high_watermark=10_000,
            records=batch(0, 20) if tp.partition else None,
        )
        for tp in positions
    ]
    f.handle_fetch_response(
        positions, R(responses=[R.FetchableTopicResponse(topic="t", partitions=parts)])
    )
    assert taken(f, 10) == [(1, 0, 9)]
    answer(f, 20)  # partition 0 now has data (and 1 and 2 their prefetches)
    assert [taken(f, 10) for _ in range(4)] == [
        [(1, 10, 19)],
        [(2, 0, 9)],
        [(2, 10, 19)],
        [(0, 0, 9)],
    ]
