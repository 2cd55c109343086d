"""LogManager: the durable topic registry, partitions and topic configs."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from trafka.brokerlite.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogStorageError,
    RecordTooLargeError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from trafka.brokerlite.storage.log_manager import REGISTRY_FILE, LogManager
from trafka.brokerlite.storage.topic_configs import ConfigSource, ConfigType, LogConfig
from trafka.brokerlite.storage.topics import validate_topic_name
from trafka.codec.errors import ErrorCode
from trafka.codec.records import decode_records, encode_batch

NOW = 1_700_000_000_000


def batch(value: bytes, ts: int = NOW) -> bytes:
    return encode_batch([(ts, b"key-" + value, value, [])])


def test_create_and_look_up(tmp_path: Path) -> None:
    with LogManager(tmp_path, LogConfig(), now_ms=NOW) as mgr:
        info = mgr.create_topic("orders", 3, {"retention.ms": "1000"}, now_ms=NOW)
        assert (info.name, info.num_partitions, info.configs) == (
            "orders",
            3,
            {"retention.ms": "1000"},
        )
        assert info.topic_id != uuid.UUID(int=0)
        assert mgr.topic("orders") == info and mgr.topic_by_id(info.topic_id) == info
        assert mgr.topic("nope") is None and mgr.topic_by_id(uuid.uuid4()) is None
        assert [t.name for t in mgr.topics()] == ["orders"]
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
            "orders-0",
            "orders-1",
            "orders-2",
        ]
        assert mgr.partition("orders", 2).config.retention_ms == 1000
        assert len(mgr.partitions("orders")) == 3
        with pytest.raises(UnknownTopicOrPartitionError) as info_err:
            mgr.partition("orders", 3)
        assert info_err.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(TopicExistsError) as exists:
            mgr.create_topic("orders", 1)
        assert exists.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
        # Kafka's words, which kafka-topics prints (tests/brokerlite/test_kafka_scripts.py)
        assert str(exists.value) == "Topic 'orders' already exists."


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a" * 250, "a/b", "a b", "tópico", "a\x00", "../etc"]
)
def test_invalid_topic_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidTopicError) as info:
        validate_topic_name(name)
    assert info.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    with LogManager(tmp_path) as mgr, pytest.raises(InvalidTopicError):
        mgr.create_topic(name, 1)


def test_valid_names_and_collisions(tmp_path: Path) -> None:
    with LogManager(tmp_path, now_ms=NOW) as mgr:
        for name in ("a" * 249, "A-b_c.9", "__consumer_offsets", "..."):
            mgr.create_topic(name, 1, now_ms=NOW)
        mgr.create_topic("metrics.cpu", 1, now_ms=NOW)
        with pytest.raises(InvalidTopicError, match="collides"):
            mgr.create_topic("metrics_cpu", 1)


def test_invalid_partitions_and_configs(tmp_path: Path) -> None:
    with LogManager(tmp_path) as mgr:
        for count in (0, -1):
            with pytest.raises(InvalidPartitionsError) as info:
                mgr.create_topic("t", count)
            assert info.value.code == ErrorCode.INVALID_PARTITIONS
        for configs, match in (
            ({"retention.mss": "1"}, "retention.mss"),
            ({"retention.ms": "soon"}, "integer"),
            ({"retention.ms": "-5"}, "minimum"),
            ({"segment.bytes": "3000000000"}, "range"),
            ({"cleanup.policy": "shred"}, "compact"),
            ({"message.timestamp.type": "NowTime"}, "LogAppendTime"),
            ({"preallocate": "maybe"}, "true or false"),
            ({"min.cleanable.dirty.ratio": "2"}, "maximum"),
        ):
            with pytest.raises(InvalidConfigError, match=match) as cfg_err:
                mgr.create_topic("t", 1, configs)
            assert cfg_err.value.code == ErrorCode.INVALID_CONFIG
        assert mgr.topics() == []


def test_validate_only_changes_nothing(tmp_path: Path) -> None:
    with LogManager(tmp_path) as mgr:
        info = mgr.create_topic("t", 2, {"retention.ms": "5"}, validate_only=True)
        assert info.num_partitions == 2 and mgr.topic("t") is None
        assert not (tmp_path / "t-0").exists()
        mgr.create_topic("t", 2)
        assert mgr.create_partitions("t", 4, validate_only=True).num_partitions == 4
        assert mgr.alter_configs("t", {"retention.ms": "5"}, validate_only=True).configs == {
            "retention.ms": "5"
        }
        assert mgr.topic("t").num_partitions == 2  # type: ignore[union-attr]
        assert mgr.topic("t").configs == {}  # type: ignore[union-attr]


def test_everything_survives_a_restart(tmp_path: Path) -> None:
    with LogManager(tmp_path, now_ms=NOW) as mgr:
        a = mgr.create_topic("a", 2, {"segment_bytes": "300", "cleanup.policy": "delete,compact"})
        b = mgr.create_topic("b", 1)
        mgr.create_partitions("b", 3)
        mgr.alter_configs("b", {"max.message.bytes": "5000"})
        for i in range(20):
            mgr.partition("a", i % 2).append(batch(b"%d" % i), now_ms=NOW)
        mgr.partition("b", 2).append(batch(b"b2"), now_ms=NOW)
        mgr.partition("a", 0).delete_records(3)
    with LogManager(tmp_path, now_ms=NOW) as mgr:
        assert mgr.topic("a") == a
        assert mgr.topic("a").configs == {  # type: ignore[union-attr]
            "segment.bytes": "300",
            "cleanup.policy": "delete,compact",  # as given, as Kafka keeps it
        }
        info_b = mgr.topic("b")
        assert info_b is not None and info_b.topic_id == b.topic_id
        assert info_b.num_partitions == 3 and info_b.configs == {"max.message.bytes": "5000"}
        assert mgr.config("b").message_max_bytes == 5000
        assert mgr.partition("a", 0).config.segment_bytes == 300
        log = mgr.partition("a", 0)
        assert (log.log_start_offset, log.log_end_offset) == (3, 10)
        values = [r.value for r in decode_records(log.read(3, 1 << 20).tobytes())]
        assert values == [b"%d" % i for i in range(6, 20, 2)]
        assert len(mgr.partition("a", 0).segment_base_offsets) > 1
        b2 = mgr.partition("b", 2)
        assert [r.value for r in decode_records(b2.read(0, 100).tobytes())] == [b"b2"]


def test_delete_topic(tmp_path: Path) -> None:
    with LogManager(tmp_path, now_ms=NOW) as mgr:
        old = mgr.create_topic("t", 2)
        mgr.partition("t", 0).append(batch(b"old"), now_ms=NOW)
        chunk_source = mgr.partition("t", 0).read(0, 100)
        mgr.delete_topic("t")
        assert mgr.topic("t") is None and mgr.topic_by_id(old.topic_id) is None
        assert not any(p.is_dir() for p in tmp_path.iterdir())
        assert chunk_source.tobytes()  # a fetch in flight can still send its bytes
        with pytest.raises(UnknownTopicOrPartitionError):
            mgr.partition("t", 0)
        with pytest.raises(UnknownTopicOrPartitionError):
            mgr.delete_topic("t")
        new = mgr.create_topic("t", 1)
        assert new.topic_id != old.topic_id
        assert mgr.partition("t", 0).log_end_offset == 0
    with LogManager(tmp_path, now_ms=NOW) as mgr:
        assert [t.num_partitions for t in mgr.topics()] == [1]


def test_interrupted_deletes_are_finished_at_start(tmp_path: Path) -> None:
    with LogManager(tmp_path, now_ms=NOW) as mgr:
        mgr.create_topic("t", 1)
        mgr.partition("t", 0).append(batch(b"old"), now_ms=NOW)
    # A crash after renaming for deletion, and one before renaming (registry already
    # written): the first is removed at start, the second when the name is reused.
    (tmp_path / "gone-0.abc-delete").mkdir()
    (tmp_path / "gone-0.abc-delete" / "x.log").write_bytes(b"x")
    registry = json.loads((tmp_path / REGISTRY_FILE).read_text())
    del registry["topics"]["t"]
    (tmp_path / REGISTRY_FILE).write_text(json.dumps(registry))
    with LogManager(tmp_path, now_ms=NOW) as mgr:
        assert not (tmp_path / "gone-0.abc-delete").exists()
        assert mgr.topics() == []
        mgr.create_topic("t", 1)
        assert mgr.partition("t", 0).log_end_offset == 0


def test_create_partitions(tmp_path: Path) -> None:
    with LogManager(tmp_path) as mgr:
        mgr.create_topic("t", 2)
        # Kafka's words (ZooKeeper-mode ZkAdminManager), which kafka-topics --alter prints
        for total, message in (
            (2, "Topic already has 2 partitions."),
            (1, "Topic currently has 2 partitions, which is higher than the requested 1."),
        ):
            with pytest.raises(InvalidPartitionsError, match=f"^{message}$"):
                mgr.create_partitions("t", total)
        with pytest.raises(UnknownTopicOrPartitionError):
            mgr.create_partitions("nope", 5)
        assert mgr.create_partitions("t", 5).num_partitions == 5
        assert mgr.partition("t", 4).log_end_offset == 0


def test_describe_configs(tmp_path: Path) -> None:
    with LogManager(tmp_path, LogConfig(retention_ms=1234)) as mgr:
        mgr.create_topic("t", 1, {"segment.ms": "60000", "min.insync.replicas": "2"})
        entries = {e.name: e for e in mgr.describe_configs("t")}
        seg = entries["segment.ms"]
        assert (seg.value, seg.is_default, seg.source) == (
            "60000",
            False,
            ConfigSource.DYNAMIC_TOPIC_CONFIG,
        )
        assert seg.config_type == ConfigType.LONG
        ret = entries["retention.ms"]  # the broker's default, not Kafka's
        assert (ret.value, ret.is_default, ret.source) == (
            "1234",
            False,
            ConfigSource.STATIC_BROKER_CONFIG,
        )
        size = entries["segment.bytes"]
        assert (size.value, size.is_default, size.source) == (
            "1073741824",
            True,
            ConfigSource.DEFAULT_CONFIG,
        )
        assert entries["flush.messages"].value == str(2**63 - 1)
        assert entries["cleanup.policy"].value == "delete"
        assert entries["min.insync.replicas"].value == "2"
        assert entries["compression.type"].value == "producer"
        assert not any(e.read_only or e.sensitive for e in entries.values())
        with pytest.raises(UnknownTopicOrPartitionError):
            mgr.describe_configs("nope")


def test_alter_configs(tmp_path: Path) -> None:
    with LogManager(tmp_path) as mgr:
        mgr.create_topic("t", 2, {"retention.ms": "100", "segment.ms": "5000"})
        info = mgr.alter_configs(
            "t", {"max.message.bytes": "100", "retention.ms": None, "flush_ms": "10"}
        )
        assert info.configs == {"max.message.bytes": "100", "segment.ms": "5000", "flush.ms": "10"}
        log = mgr.partition("t", 1)
        assert (log.config.retention_ms, log.config.flush_interval_ms) == (604800000, 10)
        with pytest.raises(RecordTooLargeError):
            log.append(batch(b"x" * 100), now_ms=NOW)
        # The whole set is replaced by a non-incremental alter.
        mgr.alter_configs("t", {"message.timestamp.type": "LogAppendTime"}, incremental=False)
        assert mgr.topic("t").configs == {"message.timestamp.type": "LogAppendTime"}  # type: ignore[union-attr]
        assert log.append(batch(b"x" * 100), now_ms=NOW).log_append_time_ms == NOW
        with pytest.raises(InvalidConfigError):
            mgr.alter_configs("t", {"flush.messages": "0"})
        with pytest.raises(UnknownTopicOrPartitionError):
            mgr.alter_configs("nope", {})
    with LogManager(tmp_path) as mgr:
        assert mgr.partition("t", 0).config.message_timestamp_type == "LogAppendTime"


def test_retention_through_the_manager(tmp_path: Path) -> None:
    size = len(batch(b"v"))
    with LogManager(tmp_path, LogConfig(segment_bytes=2 * size), now_ms=NOW) as mgr:
        mgr.create_topic("keep", 1, {"retention.ms": "-1"})
        mgr.create_topic("short", 1, {"retention.ms": "1000", "segment.ms": "500"})
        for name in ("keep", "short"):
            for _ in range(5):
                mgr.partition(name, 0).append(batch(b"v", ts=NOW), now_ms=NOW)
        # The idle active segment of "short" is rolled, then everything expires.
        assert mgr.apply_retention(NOW + 2000) == 3
        assert mgr.partition("short", 0).log_start_offset == 5
        assert mgr.partition("keep", 0).log_start_offset == 0


def test_time_based_flushing_through_the_manager(tmp_path: Path) -> None:
    with LogManager(tmp_path, now_ms=NOW) as mgr:
        mgr.create_topic("timed", 2, {"flush.ms": "1000"}, now_ms=NOW)
        mgr.create_topic("os", 1)
        for name, index in (("timed", 0), ("os", 0)):
            mgr.partition(name, index).append(batch(b"v"), now_ms=NOW)
        assert mgr.maybe_flush_all(NOW + 999) == 0
        assert mgr.maybe_flush_all(NOW + 1000) == 1  # timed-0; timed-1 has nothing pending
        assert mgr.maybe_flush_all(NOW + 5000) == 0
        mgr.flush_all()


def test_the_data_dir_is_locked(tmp_path: Path) -> None:
    with LogManager(tmp_path), pytest.raises(LogStorageError, match="in use"):
        LogManager(tmp_path)
    LogManager(tmp_path).close()


def test_unreadable_registry_refuses_to_start(tmp_path: Path) -> None:
    (tmp_path / REGISTRY_FILE).write_text("{not json")
    with pytest.raises(LogStorageError, match="registry"):
        LogManager(tmp_path)
    LogManager(tmp_path / "other").close()  # the lock was released on failure
    (tmp_path / REGISTRY_FILE).unlink()
    LogManager(tmp_path).close()


def test_the_broker_holds_at_most_max_partitions(tmp_path: Path) -> None:
    """Each partition keeps files open: a request for more than the broker may
    hold is refused before anything is created (POLICY_VIOLATION)."""
    from trafka.brokerlite.errors import PolicyViolationError

    with LogManager(tmp_path, max_partitions=5) as lm:
        lm.create_topic("a", 3)
        with pytest.raises(PolicyViolationError, match="at most 5") as caught:
            lm.create_topic("b", 3)
        assert caught.value.code == ErrorCode.POLICY_VIOLATION
        assert lm.topic("b") is None and not (tmp_path / "b-0").exists()
        with pytest.raises(PolicyViolationError):
            lm.create_topic("b", 3, validate_only=True)  # a dry run is told too
        with pytest.raises(PolicyViolationError):
            lm.create_partitions("a", 6)
        assert lm.topic("a").num_partitions == 3
        lm.create_partitions("a", 4)
        lm.create_topic("c", 1)
        lm.delete_topic("a")
        lm.create_topic("d", 4)  # room again
    with LogManager(tmp_path, max_partitions=3) as lm:
        # A lower limit never drops what exists; it only refuses more.
        assert sorted(t.name for t in lm.topics()) == ["c", "d"]
        with pytest.raises(PolicyViolationError):
            lm.create_topic("e", 1)


def test_max_partitions_defaults_to_what_the_open_file_limit_allows() -> None:
    import resource

    from trafka.brokerlite.config import BrokerConfig, ConfigError

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = BrokerConfig().partition_limit()
    assert limit >= 100
    if soft != resource.RLIM_INFINITY:
        assert limit * 3 < soft  # three files per partition still fit
    assert BrokerConfig(max_partitions=7).partition_limit() == 7
    assert BrokerConfig.from_mapping({"max.partitions": "9"}).partition_limit() == 9
    with pytest.raises(ConfigError, match="max_partitions"):
        BrokerConfig(max_partitions=0)


def test_a_topic_hosts_only_some_partitions(tmp_path: Path) -> None:
    """A cluster member keeps logs only for the partitions it replicates: the topic
    is known whole, the others have no directory; ``host`` creates and deletes logs
    (Kafka's StopReplica with delete=true), and a restart opens only the hosted."""
    with LogManager(tmp_path, now_ms=NOW) as logs:
        logs.create_topic("t", 4, topic_id=uuid.uuid4(), hosted=[0, 2], now_ms=NOW)
        assert logs.topic("t").num_partitions == 4
        assert [i for i, _ in logs.hosted("t")] == [0, 2]
        assert sorted(p.name for p in tmp_path.glob("t-*")) == ["t-0", "t-2"]
        with pytest.raises(UnknownTopicOrPartitionError):
            logs.partition("t", 1)
        logs.partition("t", 2).append(batch(b"kept"), now_ms=NOW)
        logs.partition("t", 0).append(batch(b"dropped"), now_ms=NOW)
        assert logs.host("t", [1, 2], NOW) == [0]
        assert (logs.hosts("t", 0), logs.hosts("t", 1), logs.hosts("t", 2)) == (False, True, True)
        assert sorted(p.name for p in tmp_path.glob("t-*")) == ["t-1", "t-2"]
        logs.alter_configs("t", {"retention.ms": "1000"})
        logs.create_partitions("t", 5, now_ms=NOW)  # a new partition is hosted only when told
        assert [i for i, _ in logs.hosted("t")] == [1, 2]
    with LogManager(tmp_path, now_ms=NOW) as logs:
        assert [i for i, _ in logs.hosted("t")] == [1, 2]
        assert logs.partition("t", 2).log_end_offset == 1
        assert logs.partition("t", 1).log_end_offset == 0  # created empty
        assert logs.host("t", [0, 1, 2, 3, 4], NOW) == []
        assert logs.partition("t", 0).log_end_offset == 0  # its old records are gone
        logs.delete_topic("t")
    assert not list(tmp_path.glob("t-*"))
