"""The SDK's share consumer at Kafka 4.2's share protocol (ShareFetch and
ShareAcknowledge v2), against brokerlite and Apache Kafka 4.4.

What Kafka defines and this file checks:

* KIP-1222: ``AcknowledgeType.RENEW`` in explicit acknowledgement mode keeps a
  record acquired by its member (its acquisition lock starts again); the
  renewal travels in a ShareAcknowledge marked IsRenewAck; the record is then
  delivered again to the same member (Kafka's Java client's behaviour), with
  the same delivery count (a renewal is not a delivery), and acknowledged for
  good after. No other member gets it meanwhile.
* KIP-1206: ``share.acquire.mode=record_limit`` makes the broker acquire at
  most ``max.poll.records`` records per fetch, splitting a record batch, so a
  second member gets the rest of the batch at once; ``batch_optimized`` (the
  default) acquires the whole batch for the first member.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from kafka_fixtures import Peer
from sdk_brokers import share_queue

from trafka.sdk import TopicPartition, open_producer
from trafka.sdk.errors import UsageError
from trafka.sdk.share_consumer import AcknowledgeType, ShareConsumer, open_share_consumer

pytestmark = pytest.mark.anyio

PEERS = pytest.mark.parametrize("peer", ["brokerlite", "4"], indirect=True)


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def _poll(consumer: ShareConsumer, n: int) -> list[Any]:
    got: list[Any] = []
    while len(got) < n:
        got += await consumer.poll(timeout_ms=500)
    return got


async def _one_batch(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """``values`` to partition 0 of ``topic`` in one record batch."""
    async with open_producer(bootstrap_servers=bootstrap, linger_ms=60_000) as producer:
        futures = [await producer.send(topic, v, partition=0) for v in values]
        await producer.flush()
    assert [f.result().offset for f in futures] == list(range(len(values)))


@PEERS
@pytest.mark.compat("SDK", "share groups: renew acknowledgements (KIP-1222)")
async def test_renewed_records_come_back_to_their_member(peer: Peer) -> None:
    bs = peer.bootstrap_servers
    with anyio.fail_after(120):
        topic, group = await share_queue(bs)
        await _one_batch(bs, topic, [b"slow", b"quick"])
        settings: dict[str, Any] = {"bootstrap_servers": bs, "group_id": group}
        async with (
            open_share_consumer(topic, share_acknowledgement_mode="explicit", **settings) as a,
            open_share_consumer(topic, **settings) as other,
        ):
            slow, quick = await _poll(a, 2)
            a.acknowledge(slow, AcknowledgeType.RENEW)
            a.acknowledge(quick, AcknowledgeType.ACCEPT)
            [again] = await _poll(a, 1)  # (this poll sends the renewal)
            assert (again.offset, again.value, again.delivery_count) == (0, b"slow", 1)
            assert await other.poll(timeout_ms=300) == []  # still a's
            a.acknowledge(again, AcknowledgeType.ACCEPT)
            assert await a.commit() == {TopicPartition(topic, 0): None}
            stats = a.statistics()
        assert stats.acknowledged == {"ACCEPT": 2, "RENEW": 1}
        assert stats.acknowledgements_failed == {}


@pytest.mark.parametrize(
    "peer", ["brokerlite"], indirect=True
)  # (refused in the SDK, sent nowhere)
async def test_renew_needs_explicit_acknowledgement_and_a_delivered_record(peer: Peer) -> None:
    bs = peer.bootstrap_servers
    with anyio.fail_after(120):
        for explicit in (False, True):
            topic, group = await share_queue(bs)
            await _one_batch(bs, topic, [b"x"])
            mode = "explicit" if explicit else "implicit"
            async with open_share_consumer(
                topic, bootstrap_servers=bs, group_id=group, share_acknowledgement_mode=mode
            ) as consumer:
                [record] = await _poll(consumer, 1)
                if not explicit:
                    with pytest.raises(
                        UsageError, match=r"share\.acknowledgement\.mode is implicit"
                    ):
                        consumer.acknowledge(record, AcknowledgeType.RENEW)
                    continue
                with pytest.raises(UsageError, match="cannot be renewed"):
                    consumer.acknowledge_offset(topic, 0, 1, AcknowledgeType.RENEW)
                consumer.acknowledge(record, AcknowledgeType.ACCEPT)


@PEERS
@pytest.mark.compat("SDK", "share groups: share.acquire.mode record_limit (KIP-1206)")
@pytest.mark.parametrize(("mode", "left"), [("record_limit", 3), ("batch_optimized", 0)])
async def test_record_limit_leaves_the_rest_of_a_batch_to_others(
    peer: Peer, mode: str, left: int
) -> None:
    bs = peer.bootstrap_servers
    with anyio.fail_after(120):
        topic, group = await share_queue(bs)
        await _one_batch(bs, topic, [b"%d" % i for i in range(5)])
        settings: dict[str, Any] = {"bootstrap_servers": bs, "group_id": group}
        async with open_share_consumer(
            topic, share_acquire_mode=mode, max_poll_records=2, **settings
        ) as first:
            got = await _poll(first, 2)
            assert [r.offset for r in got] == [0, 1]
            async with open_share_consumer(topic, **settings) as second:
                rest: list[Any] = []
                with anyio.move_on_after(3 if not left else 60):
                    rest = await _poll(second, left or 1)
            assert sorted(r.offset for r in rest) == list(range(2, 2 + left))
