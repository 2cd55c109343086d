"""The SDK's producer and consumer against Apache Kafka itself (3.9 on ZooKeeper,
4.x on KRaft) and brokerlite: every codec and acks setting, read back at the
offsets the delivery reports gave."""

from __future__ import annotations

import anyio
import pytest
from kafka_fixtures import Peer
from sdk_brokers import fresh

from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "trio"  # both backends are the integration tests' concern; here, the peers


@pytest.mark.compat("SDK", "produce and fetch: every codec, acks 0/1/all")
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_every_codec_and_acks_reads_back(peer: Peer, codec: str) -> None:
    bs, topic = peer.bootstrap_servers, fresh(f"rt-{codec}")
    partitions = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    with anyio.fail_after(60):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 2)])
            # Kafka's CreateTopics answers before every broker serves the new
            # partitions; acks=0 would lose what is sent earlier (no answer says
            # NOT_LEADER), so wait until both partitions answer a ListOffsets.
            await admin.list_offsets({tp: "latest" for tp in partitions})
        reports = []
        for acks in (0, 1, -1):
            async with open_producer(
                bootstrap_servers=bs, compression_type=codec, acks=acks, linger_ms=5
            ) as producer:
                futures = [
                    await producer.send(
                        topic,
                        b"v%d" % i * 20,
                        key=b"k%d-%d" % (acks, i),
                        headers=[("n", str(i))],
                        timestamp_ms=1_700_000_000_000 + i,
                    )
                    for i in range(30)
                ]
            reports += [(acks, i, await future) for i, future in enumerate(futures)]
        records = []
        async with open_consumer(bootstrap_servers=bs, auto_offset_reset="earliest") as consumer:
            consumer.assign(partitions)
            while len(records) < len(reports):
                for batch in (await consumer.getmany(timeout_ms=2000)).values():
                    records.extend(batch)
    by_key = {r.key: r for r in records}
    assert len(by_key) == len(records) == 90
    for acks, i, report in reports:
        record = by_key[b"k%d-%d" % (acks, i)]
        assert (record.value, record.timestamp) == (b"v%d" % i * 20, 1_700_000_000_000 + i)
        assert record.headers == (("n", str(i).encode()),)
        assert record.partition == report.partition
        # acks=0: no answer comes, so the offset is unknown (-1), never a guess.
        assert report.offset == (-1 if acks == 0 else record.offset)
