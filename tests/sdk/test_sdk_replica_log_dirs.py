"""Admin.alter_replica_log_dirs and describe_replica_log_dirs against a real
brokerlite (one log directory, its data_dir), as Java's alterReplicaLogDirs and
describeReplicaLogDirs: moving a replica to the directory it is in succeeds, a
directory the broker lacks is LOG_DIR_NOT_FOUND for that replica only, and the
replica's directory, size and lag come from DescribeLogDirs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.sdk import (
    NewTopic,
    ReplicaLogDirInfo,
    TopicPartition,
    TopicPartitionReplica,
    open_admin,
    open_producer,
)
from trafka.sdk.blocking import Admin as BlockingAdmin

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "replica-log-dirs")


def code(result: KafkaError | None) -> ErrorCode | None:
    return None if result is None else ErrorCode(result.code)


def test_move_to_own_dir_unknown_dir_and_describe(broker: RunningBroker) -> None:
    servers = broker.bootstrap_servers
    topic = fresh("moved")

    async def main() -> None:
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.create_topics([NewTopic(topic, 2)])
            async with open_producer(bootstrap_servers=servers) as producer:
                for _ in range(50):
                    await producer.send(topic, b"v" * 20, partition=0)
            [node] = [b.node_id for b in (await admin.describe_cluster()).brokers]
            [log_dir] = await admin.describe_log_dirs([(topic, 0), (topic, 1)])
            here = log_dir.path
            assert Path(here).is_absolute()

            p0 = TopicPartitionReplica(topic, 0, node)
            p1 = TopicPartitionReplica(topic, 1, node)
            result = await admin.alter_replica_log_dirs(
                {
                    p0: here,  # where it is: nothing to do, a success
                    (topic, 1, node): "/no/such/dir",
                    (fresh("missing"), 0, node): here,
                    (topic, 0, node + 100): here,
                }
            )
            assert list(result)[:2] == [p0, p1]
            assert result[p0] is None
            assert code(result[p1]) == ErrorCode.LOG_DIR_NOT_FOUND
            assert "/no/such/dir" in str(result[p1])
            missing, far = list(result)[2:]
            assert code(result[missing]) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert code(result[far]) == ErrorCode.BROKER_NOT_AVAILABLE

            described = await admin.describe_replica_log_dirs(
                [p0, (topic, 1, node), (topic, 7, node)]
            )
            assert list(described) == [p0, p1, TopicPartitionReplica(topic, 7, node)]
            size0 = log_dir.partitions[TopicPartition(topic, 0)]
            assert size0 > 0
            assert described[p0] == ReplicaLogDirInfo(
                current_log_dir=here, current_offset_lag=0, size=size0
            )
            assert described[p0].future_log_dir is None
            assert described[p1] == ReplicaLogDirInfo(
                current_log_dir=here, current_offset_lag=0, size=0
            )
            # A partition the broker does not hold: no directory, as Java reports it.
            assert described[TopicPartitionReplica(topic, 7, node)] == ReplicaLogDirInfo()

            with pytest.raises(KafkaError) as err:
                await admin.describe_replica_log_dirs([(topic, 0, node + 100)])
            assert err.value.code == ErrorCode.BROKER_NOT_AVAILABLE

    anyio.run(main, backend="trio")


def test_blocking_admin(broker: RunningBroker) -> None:
    topic = fresh("blocking")
    with BlockingAdmin(bootstrap_servers=broker.bootstrap_servers) as admin:
        admin.create_topics([NewTopic(topic, 1)])
        [node] = [b.node_id for b in admin.describe_cluster().brokers]
        [log_dir] = admin.describe_log_dirs()
        replica = TopicPartitionReplica(topic, 0, node)
        assert admin.alter_replica_log_dirs({replica: log_dir.path}) == {replica: None}
        info = admin.describe_replica_log_dirs([replica])[replica]
        assert info.current_log_dir == log_dir.path and info.size == 0
