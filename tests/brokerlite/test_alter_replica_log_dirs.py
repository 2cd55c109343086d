"""AlterReplicaLogDirs as a Kafka 4.0 broker with one log directory answers:
moving a partition into the directory it is already in succeeds, any other
path is LOG_DIR_NOT_FOUND, a partition that does not exist is
UNKNOWN_TOPIC_OR_PARTITION, in the order Kafka's ReplicaManager checks.
Sans-IO through the real codec, then kafka-python against a running brokerlite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trafka.brokerlite.broker import Broker
from trafka.brokerlite.config import BrokerConfig
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k34_alter_replica_log_dirs as m
from trafka.codec.messages import k35_describe_log_dirs as describe

pytestmark = pytest.mark.timeout(60)

Dir = m.AlterReplicaLogDirsRequest.AlterReplicaLogDir
DirTopic = m.AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic


def the_log_dir(core: Any) -> str:
    """The one directory, as DescribeLogDirs names it."""
    response = core.call(35, 4, describe.DescribeLogDirsRequest(topics=[]))
    [result] = response.results
    log_dir: str = result.log_dir
    return log_dir


def move(
    core: Any, version: int, *dirs: tuple[str, dict[str, list[int]]]
) -> dict[tuple[str, int], int]:
    request = m.AlterReplicaLogDirsRequest(
        dirs=[
            Dir(path=path, topics=[DirTopic(name=n, partitions=ps) for n, ps in topics.items()])
            for path, topics in dirs
        ]
    )
    response = core.call(34, version, request)
    out: dict[tuple[str, int], int] = {}
    for topic in response.results:
        for p in topic.partitions:
            assert (topic.topic_name, p.partition_index) not in out, "answered twice"
            out[(topic.topic_name, p.partition_index)] = p.error_code
    return out


@pytest.mark.parametrize("version", [1, 2])
def test_moving_into_the_one_directory_is_done_already(core: Any, version: int) -> None:
    core.broker.logs.create_topic("t", 2)
    core.broker.logs.create_topic("u", 1)
    here = the_log_dir(core)
    assert Path(here).is_absolute()
    got = move(core, version, (here, {"t": [0, 1], "u": [0, 3], "none": [0]}))
    assert got == {
        ("t", 0): ErrorCode.NONE,
        ("t", 1): ErrorCode.NONE,
        ("u", 0): ErrorCode.NONE,
        ("u", 3): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("none", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }


def test_any_other_path_is_log_dir_not_found_even_for_missing_partitions(core: Any) -> None:
    core.broker.logs.create_topic("t", 1)
    here = the_log_dir(core)
    others = [here + "/", here + "/.", str(Path(here).parent), "", "relative/dir", "/nowhere"]
    for path in others:
        got = move(core, 2, (path, {"t": [0], "none": [0]}))
        assert got == {
            ("t", 0): ErrorCode.LOG_DIR_NOT_FOUND,
            ("none", 0): ErrorCode.LOG_DIR_NOT_FOUND,
        }, path


def test_a_partition_named_under_two_paths_is_answered_for_the_last(core: Any) -> None:
    core.broker.logs.create_topic("t", 2)
    here = the_log_dir(core)
    got = move(core, 2, (here, {"t": [0, 1]}), ("/elsewhere", {"t": [1]}))
    assert got == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.LOG_DIR_NOT_FOUND}
    got = move(core, 2, ("/elsewhere", {"t": [1]}), (here, {"t": [1]}))
    assert got == {("t", 1): ErrorCode.NONE}


def test_names_too_long_for_a_future_directory_come_first(core: Any) -> None:
    # Kafka's future directory is "<topic>-<partition>.<32 hex>-future", at most
    # 255 characters: topic and partition digits may take 214 together.
    name = "x" * 213
    core.broker.logs.create_topic(name, 1)
    here = the_log_dir(core)
    got = move(core, 2, (here, {name: [0, 10]}))
    assert got == {
        (name, 0): ErrorCode.NONE,
        (name, 10): ErrorCode.INVALID_TOPIC_EXCEPTION,
    }
    # Before the path check too, and for topics that do not exist.
    got = move(core, 2, ("/elsewhere", {name: [0, -1], "y" * 240: [0]}))
    assert got == {
        (name, 0): ErrorCode.LOG_DIR_NOT_FOUND,
        (name, -1): ErrorCode.INVALID_TOPIC_EXCEPTION,
        ("y" * 240, 0): ErrorCode.INVALID_TOPIC_EXCEPTION,
    }


def test_the_directory_is_named_with_symbolic_links_resolved(core: Any, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    config = BrokerConfig(port=0, data_dir=link)
    broker = Broker(config, now_ms=core.now, advertised=("127.0.0.1", 9999))
    try:
        linked = type(core)(broker)  # the same sans-IO driver, on this broker
        linked.broker.logs.create_topic("t", 1)
        assert the_log_dir(linked) == str(real.resolve())
        assert move(linked, 2, (str(real.resolve()), {"t": [0]})) == {("t", 0): ErrorCode.NONE}
        assert move(linked, 2, (str(link), {"t": [0]})) == {("t", 0): ErrorCode.LOG_DIR_NOT_FOUND}
    finally:
        broker.close()


# -- kafka-python ----------------------------------------------------------------------------


def test_kafka_python_alter_replica_log_dirs(running: Any) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import LogDirNotFoundError, NoError, UnknownTopicOrPartitionError
    from kafka.structs import TopicPartitionReplica

    node = running.broker.node_id
    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap_servers, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic("dirs", 2, 1)])
        [described] = admin.describe_log_dirs(brokers=[node])
        [log_dir] = [d["log_dir"] for d in described["log_dirs"]]
        result = admin.alter_replica_log_dirs(
            {
                TopicPartitionReplica("dirs", 0, node): log_dir,
                TopicPartitionReplica("dirs", 1, node): log_dir,
                TopicPartitionReplica("dirs", 5, node): log_dir,
                TopicPartitionReplica("nope", 0, node): log_dir,
                ("dirs", 0, node): log_dir + "-other",
            }
        )
    finally:
        admin.close()
    assert result == {
        TopicPartitionReplica("dirs", 0, node): LogDirNotFoundError,
        TopicPartitionReplica("dirs", 1, node): NoError,
        TopicPartitionReplica("dirs", 5, node): UnknownTopicOrPartitionError,
        TopicPartitionReplica("nope", 0, node): UnknownTopicOrPartitionError,
    }
