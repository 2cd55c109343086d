"""The proxy's record encryption (issue #83, item 1) on brokerlite, with the
key-file KMS: values of the chosen topics reach the broker as frames (no
plaintext in any of its files), consumers through the proxy read plaintext,
every record once and in order, from trafka's SDK, confluent-kafka and
Kafka's Java producer, plain, idempotent and transactional, routed by key
and forwarded; a KEK rotation leaves old records readable; what does not
decrypt is CORRUPT_MESSAGE, never ciphertext.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client_matrix import KEYS, by_partition, java_producer, java_sends, read_committed
from encryption_helpers import (
    Target,
    fetch_once,
    frames,
    key_file,
    no_plaintext,
    once_in_order,
    plaintext_in_files,
    produce_every_way,
    read_in_order,
    target_for,
)
from proxy_helpers import create, fresh, misreported, placement, sdk_reports

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.codec.errors import ErrorCode
from trafka.proxy import RunningProxy, proxy_in_thread
from trafka.proxy.encryption import RecordEncryption, add_key_version
from trafka.proxy.encryption.frame import MAGIC

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 3


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("encryption")


@pytest.fixture(scope="module")
def broker(folder: Path) -> Iterator[RunningBroker]:
    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=folder / "data", group_initial_rebalance_delay_ms=0
    ) as running:
        yield running


@pytest.fixture(scope="module")
def keys(folder: Path) -> Path:
    return key_file(folder, "orders", "other")


@pytest.fixture(scope="module")
def encryption(keys: Path) -> RecordEncryption:
    # Few records per DEK, so a rotation of the KEK reaches new records soon.
    return RecordEncryption(
        {
            "kms": "keyfile",
            "key_file": str(keys),
            "topics": {"enc-.*": "orders"},
            "dek_max_records": 100,
        }
    )


@pytest.fixture(scope="module", params=["brokerlite", "4"])
def broker_or_kafka(request: pytest.FixtureRequest, broker: RunningBroker, folder: Path) -> Target:
    return target_for(request, broker.bootstrap_servers, folder / "data")


@pytest.fixture(scope="module", params=["routed", "forwarded"])
def proxy(
    request: Any, broker: RunningBroker, encryption: RecordEncryption
) -> Iterator[RunningProxy]:
    route = "murmur2" if request.param == "routed" else "none"
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,), port=0, filters=(encryption,), route_keys=route
    ) as running:
        yield running


def test_every_client_reads_plaintext_once_in_order_and_the_disk_holds_none(
    broker: RunningBroker, proxy: RunningProxy, folder: Path
) -> None:
    topic = fresh("enc-all")
    create(broker.bootstrap_servers, topic, PARTITIONS)
    reports = produce_every_way(proxy.bootstrap_servers, topic, "a")
    once_in_order(
        read_in_order(proxy.bootstrap_servers, topic, PARTITIONS), [r[0] for r in reports]
    )
    straight = placement(
        broker.bootstrap_servers, topic, PARTITIONS, isolation_level="read_committed"
    )
    assert len(straight) == len(reports)
    assert {kek for kek, _ in frames(straight)} == {"orders"}
    assert plaintext_in_files(folder / "data", b"SECRET-a") == []
    counted = proxy.statistics.filters["encryption"]
    assert counted.records_encrypted >= len(reports) and counted.partitions_decrypted > 0


def test_kafkas_java_producer_plain_idempotent_and_transactional(
    broker: RunningBroker, proxy: RunningProxy, folder: Path
) -> None:
    """Kafka's Java producer (4.4), plain, idempotent and in transactions (the
    second aborted), one JVM (tests/proxy/client_matrix.py): brokerlite takes
    its re-encrypted batches, a read_committed consumer through the proxy
    reads every committed record once and in order, every delivery report
    where its record is; brokerlite holds frames only, routed and not."""
    topic, prefix = fresh("enc-java"), fresh("SECRET-java")
    create(broker.bootstrap_servers, topic, PARTITIONS)
    reports, sent = java_sends(
        java_producer(), proxy.bootstrap_servers, topic, 20, prefix, fresh("tx-java"), {}
    )
    records = read_committed(proxy.bootstrap_servers, topic, PARTITIONS, sent)
    once_in_order(by_partition(records, PARTITIONS), sent, keys=KEYS)
    assert misreported(records, reports) is None, misreported(records, reports)
    straight = placement(
        broker.bootstrap_servers, topic, PARTITIONS, isolation_level="read_committed"
    )
    assert len(frames(straight)) == len(sent)
    assert plaintext_in_files(folder / "data", prefix.encode()) == []


def test_a_topic_not_named_is_not_encrypted(broker: RunningBroker, proxy: RunningProxy) -> None:
    topic = fresh("clear")
    create(broker.bootstrap_servers, topic, 1)
    sdk_reports(proxy.bootstrap_servers, topic, [(b"in the clear", b"k")])
    assert [r.value for r in placement(broker.bootstrap_servers, topic, 1)] == [b"in the clear"]


def test_a_rotated_kek_encrypts_new_records_and_old_ones_still_read(
    broker: RunningBroker, proxy: RunningProxy, keys: Path
) -> None:
    topic = fresh("enc-rot")
    create(broker.bootstrap_servers, topic, 1)
    before = sdk_reports(
        proxy.bootstrap_servers, topic, [(b"old-%d" % i, b"k") for i in range(150)]
    )
    version = add_key_version(keys, "orders")
    after = sdk_reports(proxy.bootstrap_servers, topic, [(b"new-%d" % i, b"k") for i in range(150)])
    got = read_in_order(proxy.bootstrap_servers, topic, 1)
    once_in_order(got, [r[0] for r in before + after])
    versions = [v for _, v in frames(placement(broker.bootstrap_servers, topic, 1))]
    # Within max_records (100) of the rotation, new records are under the new version.
    assert versions[-1] == str(version) and versions[0] == str(version - 1)


@pytest.mark.parametrize("bad", ["garbage", "foreign", "tampered", "unknown-version"])
def test_what_does_not_decrypt_is_corrupt_message_after_the_records_before_it(
    broker: RunningBroker, proxy: RunningProxy, folder: Path, keys: Path, bad: str
) -> None:
    """A consumer through the proxy gets the records before the one that does
    not decrypt, then CORRUPT_MESSAGE for it (as Kafka answers a corrupt
    record, protocol guide's error codes), never its ciphertext."""
    topic = fresh("enc-bad")
    create(broker.bootstrap_servers, topic, 1)
    sdk_reports(proxy.bootstrap_servers, topic, [(b"good-%d" % i, b"k") for i in range(5)])
    good = placement(broker.bootstrap_servers, topic, 1)[0].value
    if bad == "garbage":
        value = MAGIC + b"\x01\x05junk"
    elif bad == "unknown-version":
        value = MAGIC + b"\x09" + good[5:]
    elif bad == "tampered":
        value = good[:-1] + bytes([good[-1] ^ 1])
    else:  # a frame of a KEK this proxy's key file does not hold
        elsewhere = folder / fresh("elsewhere")
        elsewhere.mkdir()
        other = RecordEncryption(
            {
                "kms": "keyfile",
                "key_file": str(key_file(elsewhere, "elsewhere")),
                "topics": {".*": "elsewhere"},
            }
        )
        scratch = fresh("enc-scratch")
        create(broker.bootstrap_servers, scratch, 1)
        value = _encrypted_by(other, broker, scratch)
    sdk_reports(broker.bootstrap_servers, topic, [(value, b"k")])  # straight to the broker
    sdk_reports(proxy.bootstrap_servers, topic, [(b"after", b"k")])
    assert fetch_once(proxy.bootstrap_servers, topic, 0) == (0, [b"good-%d" % i for i in range(5)])
    assert fetch_once(proxy.bootstrap_servers, topic, 5) == (ErrorCode.CORRUPT_MESSAGE, [])
    assert fetch_once(proxy.bootstrap_servers, topic, 6) == (0, [b"after"])


def _encrypted_by(other: RecordEncryption, broker: RunningBroker, topic: str) -> bytes:
    """A value encrypted by another proxy (its own key file), read back raw."""
    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0, filters=(other,)) as px:
        sdk_reports(px.bootstrap_servers, topic, [(b"foreign", b"k")])
    value: bytes = placement(broker.bootstrap_servers, topic, 1)[-1].value
    return value


def test_confluent_kafka_consumers_read_up_to_an_unreadable_record_then_get_its_error(
    broker: RunningBroker, proxy: RunningProxy
) -> None:
    """librdkafka hands CORRUPT_MESSAGE to the application as a consumer error
    (its ``INVALID_MSG``, code 2) at the record's offset, after the records before it."""
    import confluent_kafka

    topic = fresh("enc-ck")
    create(broker.bootstrap_servers, topic, 1)
    sdk_reports(proxy.bootstrap_servers, topic, [(b"good-%d" % i, b"k") for i in range(3)])
    sdk_reports(broker.bootstrap_servers, topic, [(MAGIC + b"\x01junk", b"k")])
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": proxy.bootstrap_servers,
            "group.id": fresh("g"),
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        while True:
            msg = consumer.poll(30)
            assert msg is not None, got
            if msg.error():
                break
            got.append(msg.value())
    finally:
        consumer.close()
    assert got == [b"good-0", b"good-1", b"good-2"]
    assert msg.error().code() == ErrorCode.CORRUPT_MESSAGE, msg.error()
    assert "offset 3" in msg.error().str()


def test_share_consumers_read_plaintext_through_the_proxy(
    broker: RunningBroker, proxy: RunningProxy
) -> None:
    """ShareFetch answers (share groups, KIP-932) are decrypted as Fetch answers
    are: librdkafka's share consumer reads every record's plaintext once."""
    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    topic, group = fresh("enc-share"), fresh("queue")
    create(broker.bootstrap_servers, topic, 2)
    earliest = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap_servers})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[earliest])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    sent = [b"SECRET-share-%d" % i for i in range(100)]
    sdk_reports(proxy.bootstrap_servers, topic, [(v, b"k%d" % (i % 7)) for i, v in enumerate(sent)])
    assert len(frames(placement(broker.bootstrap_servers, topic, 2))) == len(sent)
    consumer = ShareConsumer({"bootstrap.servers": proxy.bootstrap_servers, "group.id": group})
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        for _ in range(300):
            for message in consumer.poll(0.2):
                assert message.error() is None, message.error()
                values.append(message.value())
            if len(values) >= len(sent):
                break
        consumer.commit_sync(30)
    finally:
        consumer.close()
    assert sorted(values) == sorted(sent)


def test_keys_encrypted_deterministically_read_back_and_keep_their_partition(
    broker_or_kafka: Target, keys: Path
) -> None:
    """``encrypt_keys``: a topic's record keys become key frames, the same
    frame for the same key (so compaction still keeps one record per key),
    tombstones (null values) stay null; consumers through the proxy read the
    plaintext keys; no plaintext key on disk. Routing hashes the key the client
    gave, not its frame (issue #83: "routing still hashes the plaintext key"):
    the producer's CRC32 partitioner put the records elsewhere, and each lands
    on murmur2's partition of its plaintext key, as it would unencrypted. On
    brokerlite and on Apache Kafka 4.x."""
    from trafka.proxy.encryption.frame import KEY_MAGIC
    from trafka.sdk.partitioners import murmur2_partition

    target = broker_or_kafka
    topic = fresh("enc-keys")
    compacted = {"cleanup.policy": "compact"}
    create(target.bootstrap_servers, topic, 3, configs=compacted, served=target.kafka)
    secret = b"SECRETKEY-" + topic.encode()  # this test's own, on a broker other tests share
    encryption = RecordEncryption(
        {
            "kms": "keyfile",
            "key_file": str(keys),
            "topics": {"enc-keys-.*": "orders"},
            "encrypt_keys": ["enc-keys-.*"],
        }
    )
    with proxy_in_thread(upstream=(target.bootstrap_servers,), port=0, filters=(encryption,)) as px:
        sends: list[tuple[Any, bytes]] = []
        # Each of the routing's plans: idempotent (the SDK's default), plain, transactional.
        for mode, settings in (
            ("idempotent", {}),
            ("plain", {"enable_idempotence": False}),
            ("transactional", {"transactional_id": topic}),
        ):
            mine: list[tuple[Any, bytes]] = [
                (b"%s-%d" % (mode.encode(), i), b"%s-%d" % (secret, i % 5)) for i in range(20)
            ]
            sdk_reports(px.bootstrap_servers, topic, mine, **settings)
            sends += mine
        sends.append((None, secret + b"-0"))  # a tombstone
        sdk_reports(px.bootstrap_servers, topic, sends[-1:])
        read = placement(px.bootstrap_servers, topic, 3, isolation_level="read_committed")
        assert sorted((r.key, r.value or b"") for r in read) == sorted(
            (k, v or b"") for v, k in sends
        )
        assert [r.value for r in read if r.value is None] == [None]
        plain = {(r.partition, r.offset): r.key for r in read}
        straight = placement(target.bootstrap_servers, topic, 3, isolation_level="read_committed")
        frames: dict[bytes, set[bytes]] = {}
        for r in straight:
            assert r.key.startswith(KEY_MAGIC)
            key = plain[(r.partition, r.offset)]
            frames.setdefault(r.key, set()).add(key)
            assert r.partition == murmur2_partition(key, 3), (r.partition, key)
        assert len(frames) == 5 and all(len(keys) == 1 for keys in frames.values())
    assert {murmur2_partition(k, 3) for _, k in sends} != {0}  # the keys spread
    no_plaintext(target, topic, secret)


def test_trafkas_consumer_reads_up_to_an_unreadable_record_then_raises_its_error(
    broker: RunningBroker, proxy: RunningProxy
) -> None:
    from trafka.codec.errors import KafkaError
    from trafka.sdk import TopicPartition
    from trafka.sdk.blocking import Consumer

    topic = fresh("enc-sdk")
    create(broker.bootstrap_servers, topic, 1)
    sdk_reports(proxy.bootstrap_servers, topic, [(b"good-%d" % i, b"k") for i in range(3)])
    sdk_reports(broker.bootstrap_servers, topic, [(MAGIC + b"\x01junk", b"k")])
    got: list[bytes] = []
    with Consumer(bootstrap_servers=proxy.bootstrap_servers, enable_auto_commit=False) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        with pytest.raises(KafkaError) as raised:
            for _ in range(100):
                for records in consumer.getmany(timeout_ms=500).values():
                    got += [r.value for r in records]
    assert got == [b"good-0", b"good-1", b"good-2"]
    assert raised.value.code == ErrorCode.CORRUPT_MESSAGE
