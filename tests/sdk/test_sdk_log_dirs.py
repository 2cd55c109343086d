"""What brokerlite's disk holds, seen by clients: DescribeLogDirs (trafka's admin
and kafka-python's ``describe_log_dirs`` see the one log directory, each
partition's size equal to its segment files), and the partitions it refuses to
hold past ``max_partitions``."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from trafka.brokerlite import broker_in_thread
from trafka.sdk import LogDirDescription, NewTopic, TopicPartition, open_admin, open_producer

pytestmark = pytest.mark.timeout(60)


def _on_disk(data: Path, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in (data / f"{topic}-{partition}").glob("*.log"))


def test_partition_sizes_match_the_segment_files(tmp_path: Path) -> None:
    from kafka import KafkaAdminClient

    data = tmp_path / "data"
    with broker_in_thread(port=0, data_dir=data) as running:
        bs = running.bootstrap_servers

        async def main() -> tuple[list[LogDirDescription], list[LogDirDescription]]:
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("sized", 3), NewTopic("empty", 1)])
                async with open_producer(bootstrap_servers=bs) as producer:
                    for i in range(300):
                        await producer.send("sized", b"v" * (i % 50), partition=i % 2)
                every = await admin.describe_log_dirs()
                some = await admin.describe_log_dirs(
                    [TopicPartition("sized", 1), TopicPartition("nope", 0), ("empty", 5)]
                )
                return every, some

        every, some = anyio.run(main, backend="trio")
        [only] = every
        assert only.node_id == 1 and only.error is None
        assert Path(only.path) == data.resolve()
        assert only.total_bytes is not None and only.usable_bytes is not None
        assert only.total_bytes >= only.usable_bytes > 0
        assert only.partitions == {
            TopicPartition("sized", 0): _on_disk(data, "sized", 0),
            TopicPartition("sized", 1): _on_disk(data, "sized", 1),
            TopicPartition("sized", 2): 0,
            TopicPartition("empty", 0): 0,
        }
        assert only.partitions[TopicPartition("sized", 0)] > 0
        # Asked for some: the ones that exist, nothing else.
        assert [d.partitions for d in some] == [
            {TopicPartition("sized", 1): _on_disk(data, "sized", 1)}
        ]
        kp = KafkaAdminClient(bootstrap_servers=bs)
        try:
            [broker] = kp.describe_log_dirs()
        finally:
            kp.close()
        [log_dir] = broker["log_dirs"]
        sizes = {
            (t["name"], p["partition_index"]): p["partition_size"]
            for t in log_dir["topics"]
            for p in t["partitions"]
        }
        assert sizes == {(tp.topic, tp.partition): n for tp, n in only.partitions.items()}


def test_more_partitions_than_the_broker_holds_are_refused_clearly(tmp_path: Path) -> None:
    """max_partitions: CreateTopics and CreatePartitions past it get POLICY_VIOLATION
    with the reason, in trafka's admin and in confluent-kafka's; the broker goes on."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic as CkTopic

    from trafka.codec import ErrorCode, KafkaError

    with broker_in_thread(port=0, data_dir=tmp_path / "data", max_partitions=4) as running:
        bs = running.bootstrap_servers

        async def main() -> None:
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("fits", 3)])
                with pytest.raises(KafkaError) as caught:
                    await admin.create_topics([NewTopic("too-many", 2)])
                assert caught.value.code == ErrorCode.POLICY_VIOLATION
                assert "max.partitions" in str(caught.value)
                with pytest.raises(KafkaError) as grown:
                    await admin.create_partitions({"fits": 5})
                assert grown.value.code == ErrorCode.POLICY_VIOLATION
                await admin.create_partitions({"fits": 4})
                assert (await admin.list_topics()) == {"fits": 4}

        anyio.run(main, backend="trio")
        ck = AdminClient({"bootstrap.servers": bs})
        future = ck.create_topics([CkTopic("also-too-many", 1, 1)])["also-too-many"]
        with pytest.raises(Exception, match=r"POLICY_VIOLATION|max\.partitions"):
            future.result(30)
