"""The proxy between real clients and a real brokerlite.

What lands where is always read straight from the broker (not through the
proxy), so the checks do not depend on the proxy's own view.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import anyio
import kafka
import pytest
from proxy_helpers import confluent_produce, create, fresh, placement

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.codec import ErrorCode, protocol
from trafka.codec.framing import FrameReader
from trafka.codec.messages import k00_produce as pm
from trafka.codec.records import encode_batch
from trafka.proxy import RunningProxy, proxy_in_thread
from trafka.sdk import open_admin, open_producer
from trafka.sdk.partitioners import crc32_partition, murmur2_partition

pytestmark = pytest.mark.timeout(120)
KCAT = shutil.which("kcat")


@pytest.fixture(scope="module")
def proxy(broker: RunningBroker) -> Iterator[RunningProxy]:
    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0) as running:
        yield running


def test_librdkafka_keys_land_where_java_would_put_them(
    broker: RunningBroker, proxy: RunningProxy
) -> None:
    topic = fresh()
    create(proxy.bootstrap_servers, topic, 6)
    confluent_produce(proxy.bootstrap_servers, topic, 400)
    records = placement(broker.bootstrap_servers, topic, 6)
    assert len(records) == 400
    assert all(r.partition == murmur2_partition(r.key, 6) for r in records)
    # Per key, the order the producer sent is kept.
    for key in {r.key for r in records}:
        values = [int(r.value[1:]) for r in records if r.key == key]
        assert values == sorted(values)

    # Without the proxy, librdkafka's own partitioner (CRC32) places them elsewhere.
    direct = fresh()
    create(broker.bootstrap_servers, direct, 6)
    confluent_produce(broker.bootstrap_servers, direct, 400)
    records = placement(broker.bootstrap_servers, direct, 6)
    assert all(r.partition == crc32_partition(r.key, 6) for r in records)
    assert any(r.partition != murmur2_partition(r.key, 6) for r in records)


def test_a_proxy_without_routing_leaves_records_where_the_client_put_them(
    broker: RunningBroker,
) -> None:
    topic = fresh()
    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0, route_keys="none") as px:
        create(px.bootstrap_servers, topic, 6)
        confluent_produce(px.bootstrap_servers, topic, 200)
    records = placement(broker.bootstrap_servers, topic, 6)
    assert all(r.partition == crc32_partition(r.key, 6) for r in records)


def test_trace_headers_survive_key_routing_byte_for_byte(
    broker: RunningBroker, proxy: RunningProxy
) -> None:
    """Records a traced trafka producer sent with librdkafka's partitioner
    (CRC32): the proxy moves most to their murmur2 partition, splitting and
    re-batching them, and every record keeps its headers byte for byte: the
    ``traceparent`` its ``send`` span injected (W3C Trace Context) and the
    application's own (repeated names, a null value, bytes that are not UTF-8)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer = TracerProvider()
    exporter = InMemorySpanExporter()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    topic = fresh()
    create(proxy.bootstrap_servers, topic, 6)
    own = [("app", b"\x00\xff\x80"), ("dup", b"1"), ("dup", b"2"), ("nil", None)]

    async def go() -> None:
        async with open_producer(
            bootstrap_servers=proxy.bootstrap_servers,
            partitioner="consistent_random",
            linger_ms=20,
            otel_tracer_provider=tracer,
        ) as producer:
            futures = [
                await producer.send(topic, b"v%d" % i, key=b"k%d" % i, headers=own)
                for i in range(120)
            ]
            for future in futures:
                await future

    anyio.run(go, backend="trio")
    spans = {s.attributes["messaging.kafka.message.key"]: s for s in exporter.get_finished_spans()}
    records = placement(broker.bootstrap_servers, topic, 6)
    assert len(records) == len(spans) == 120
    assert all(r.partition == murmur2_partition(r.key, 6) for r in records)
    assert sum(r.partition != crc32_partition(r.key, 6) for r in records) > 60  # routed
    for r in records:
        ctx = spans[r.key.decode()].context
        parent = b"00-%032x-%016x-%02x" % (ctx.trace_id, ctx.span_id, ctx.trace_flags)
        assert r.headers == (*own, ("traceparent", parent))


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_kcat_sees_the_proxy_and_its_keys_are_routed(
    broker: RunningBroker, proxy: RunningProxy
) -> None:
    assert KCAT is not None
    topic = fresh()
    create(proxy.bootstrap_servers, topic, 4)
    listing = subprocess.run(
        [KCAT, "-b", proxy.bootstrap_servers, "-L", "-t", topic],
        capture_output=True,
        timeout=30,
        check=True,
    ).stdout.decode()
    (node_port,) = {port for _, (_, port) in proxy.statistics.nodes.items()}
    assert f"127.0.0.1:{node_port}" in listing
    assert broker.bootstrap_servers not in listing
    lines = b"".join(b"k%d:value %d\n" % (i % 9, i) for i in range(90))
    subprocess.run(
        [KCAT, "-b", proxy.bootstrap_servers, "-P", "-t", topic, "-K:"],
        input=lines,
        timeout=30,
        check=True,
    )
    records = placement(broker.bootstrap_servers, topic, 4)
    assert len(records) == 90
    assert all(r.partition == murmur2_partition(r.key, 4) for r in records)


def test_kafka_python_group_consumes_through_the_proxy(
    broker: RunningBroker, proxy: RunningProxy
) -> None:
    topic = fresh()
    create(proxy.bootstrap_servers, topic, 3)
    confluent_produce(proxy.bootstrap_servers, topic, 120)
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=proxy.bootstrap_servers,
        group_id=fresh("group"),
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )
    try:
        # kafka-python's leader assigns only the partitions its metadata knows (and
        # joins again only at its next metadata refresh): let it see the topic first.
        deadline = time.monotonic() + 30
        while consumer.partitions_for_topic(topic) != {0, 1, 2}:
            assert time.monotonic() < deadline, "kafka-python never saw the topic"
            time.sleep(0.05)
        consumer.subscribe([topic])
        got = []
        for message in consumer:
            got.append(message)
            if len(got) == 120:
                break
        # Its view of the cluster is the proxy's listener, not the broker.
        ports = {b.port for b in consumer._client.cluster.brokers()}
        consumer.commit()
    finally:
        consumer.close()
    assert sorted(int(m.value[1:]) for m in got) == list(range(120))
    assert ports == {port for _, port in proxy.statistics.nodes.values()}
    assert broker.address[1] not in ports


def test_aiokafka_round_trip_through_the_proxy(broker: RunningBroker, proxy: RunningProxy) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = fresh()
    create(proxy.bootstrap_servers, topic, 4)
    # CRC32 puts these keys elsewhere than murmur2 would: a partitioner that
    # chose like librdkafka shows the proxy routing aiokafka's records too.
    keys = [b"a%d" % i for i in range(50)]

    def crc32_like(key: bytes, all_partitions: list[int], available: list[int]) -> int:
        return all_partitions[crc32_partition(key, len(all_partitions))]

    async def go() -> list[Any]:
        producer = AIOKafkaProducer(
            bootstrap_servers=proxy.bootstrap_servers, partitioner=crc32_like
        )
        await producer.start()
        try:
            for i, key in enumerate(keys):
                await producer.send(topic, b"%d" % i, key=key)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=proxy.bootstrap_servers,
            group_id=fresh("aio"),
            auto_offset_reset="earliest",
        )
        await consumer.start()
        got: list[Any] = []
        try:
            async with asyncio.timeout(30):
                while len(got) < len(keys):
                    for recs in (await consumer.getmany(timeout_ms=500)).values():
                        got.extend(recs)
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(go())
    assert sorted(int(m.value) for m in got) == list(range(50))
    assert all(m.partition == murmur2_partition(m.key, 4) for m in got)
    assert any(crc32_partition(k, 4) != murmur2_partition(k, 4) for k in keys)


def test_trafka_transactions_are_routed_and_stay_atomic(
    broker: RunningBroker, proxy: RunningProxy
) -> None:
    """A transaction whose records the client put on partitions of its own
    choosing: behind the proxy each lands on its key's murmur2 partition (added
    to the transaction by the proxy), and the aborted one stays invisible."""
    topic = fresh()
    create(proxy.bootstrap_servers, topic, 3)

    async def go() -> None:
        async with open_producer(
            bootstrap_servers=proxy.bootstrap_servers, transactional_id=fresh("tx")
        ) as producer:
            await producer.init_transactions()
            async with producer.transaction():
                for i in range(30):
                    await producer.send(topic, b"%d" % i, key=b"k%d" % i, partition=i % 3)
            producer.begin_transaction()
            for i in range(10):
                await producer.send(topic, b"aborted", key=b"x%d" % i, partition=0)
            await producer.flush()
            await producer.abort_transaction()

    before = proxy.statistics.routing.records_moved
    anyio.run(go, backend="trio")
    records = placement(proxy.bootstrap_servers, topic, 3, isolation_level="read_committed")
    assert sorted(int(r.value) for r in records) == list(range(30))
    assert all(r.partition == murmur2_partition(r.key, 3) for r in records)
    assert proxy.statistics.routing.records_moved > before
    assert proxy.statistics.routing.batches_untouched_idempotent == 0


def test_bad_frames_close_only_their_connection(broker: RunningBroker, proxy: RunningProxy) -> None:
    host, port = proxy.address
    refused = proxy.statistics.refused_frames
    for junk in (
        b"\xff\xff\xff\xf0",  # a negative length
        b"\x7f\xff\xff\xff" + b"x" * 10,  # a length far beyond the maximum
        b"\x00\x00\x00\x03abc",  # too short for a request header
    ):
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(junk)
            s.settimeout(10)
            assert s.recv(100) == b""  # closed by the proxy, nothing answered
    assert proxy.statistics.refused_frames == refused + 3
    # Other clients carry on.
    topic = fresh()
    create(proxy.bootstrap_servers, topic, 1)
    confluent_produce(proxy.bootstrap_servers, topic, 5)
    assert len(placement(broker.bootstrap_servers, topic, 1)) == 5


def test_a_corrupt_batch_reaches_the_broker_which_refuses_it(
    broker: RunningBroker, proxy: RunningProxy
) -> None:
    topic = fresh()
    create(proxy.bootstrap_servers, topic, 2)
    confluent_produce(proxy.bootstrap_servers, topic, 1)  # the proxy learns the topic
    node_port = next(iter(proxy.statistics.nodes.values()))[1]
    blob = bytearray(encode_batch([(0, b"key-1", b"v", [])]))
    blob[-1] ^= 0xFF  # the CRC no longer matches
    body = pm.ProduceRequest(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            pm.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    pm.ProduceRequest.PartitionProduceData(index=0, records=bytes(blob))
                ],
            )
        ],
    )
    header = protocol.RequestHeader(
        request_api_key=0, request_api_version=9, correlation_id=77, client_id="raw"
    )
    before = proxy.statistics.routing.batches_untouched_malformed
    with socket.create_connection((proxy.address[0], node_port), timeout=10) as s:
        s.sendall(protocol.encode_request(header, body))
        reader = FrameReader()
        while (frame := reader.next_frame()) is None:
            chunk = s.recv(65536)
            assert chunk, "the proxy closed the connection"
            reader.feed(chunk)
    _, answer = protocol.decode_response(frame, 0, 9)
    (part,) = answer.responses[0].partition_responses
    assert part.error_code == ErrorCode.CORRUPT_MESSAGE
    assert proxy.statistics.routing.batches_untouched_malformed == before + 1


def test_sasl_passes_through(tmp_path_factory: pytest.TempPathFactory) -> None:
    users = {"svc": "pw"}
    with (
        broker_in_thread(
            port=0,
            host="127.0.0.1",
            data_dir=tmp_path_factory.mktemp("proxy-sasl"),
            security_protocol="SASL_PLAINTEXT",
            sasl_users=users,
        ) as secured,
        proxy_in_thread(upstream=(secured.bootstrap_servers,), port=0) as px,
    ):
        settings = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_username": "svc",
        }

        async def go(password: str) -> int:
            async with open_admin(
                bootstrap_servers=px.bootstrap_servers, sasl_password=password, **settings
            ) as admin:
                return len(await admin.list_topics())

        assert anyio.run(go, "pw", backend="trio") >= 0
        with pytest.raises(Exception, match="refused the SASL authentication"):
            anyio.run(go, "wrong", backend="trio")


def test_command_line_checks_its_arguments() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "trafka.tools.cli", "proxy", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert "--route-keys" in run("--help").stdout
    bad = run("--upstream", "nohost", "--listen", "127.0.0.1:0")
    assert bad.returncode != 0 and "not host:port" in bad.stderr
    bad = run("--upstream", "h:1", "--listen", "0.0.0.0:0")
    assert bad.returncode != 0 and "advertised_host" in bad.stderr
    # What fails at start is said in a line, not as a traceback.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        bad = run("--upstream", "h:1", "--listen", f"127.0.0.1:{port}", "--no-announce")
    assert bad.returncode == 1 and "cannot start the proxy" in bad.stderr
    assert "Address already in use" in bad.stderr and "Traceback" not in bad.stderr
    bad = run(
        "--upstream", "h:1", "--listen", "127.0.0.1:0", "--no-announce",
        "--journal", "/dev/null/journal",
    )  # fmt: skip
    assert bad.returncode == 1 and "cannot open the journal" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_librdkafka_share_consumers_work_through_the_proxy(
    broker: RunningBroker, proxy: RunningProxy
) -> None:
    """Share groups (KIP-932) through the proxy: heartbeats, share sessions,
    ShareFetch and ShareAcknowledge (whose answers the proxy reads for leader
    hints) pass, and every record goes to exactly one consumer."""
    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    topic, group = fresh(), fresh("queue")
    create(proxy.bootstrap_servers, topic, 3)
    earliest = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap_servers})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[earliest])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    confluent_produce(proxy.bootstrap_servers, topic, 300)
    consumers = [
        ShareConsumer({"bootstrap.servers": proxy.bootstrap_servers, "group.id": group})
        for _ in range(2)
    ]
    values: list[bytes] = []
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        for _ in range(200):
            for consumer in consumers:
                for message in consumer.poll(0.2):
                    assert message.error() is None, message.error()
                    values.append(message.value())
            if len(values) >= 300:
                break
        for consumer in consumers:
            consumer.commit_sync(30)
    finally:
        for consumer in consumers:
            consumer.close()
    assert sorted(values) == sorted(r.value for r in placement(broker.bootstrap_servers, topic, 3))
    assert len(set(values)) == len(values) == 300


def test_acls_see_each_client_through_the_proxy(tmp_path_factory: pytest.TempPathFactory) -> None:
    """SASL passes through, so the broker authorizes each client as itself, not the
    proxy: a principal without WRITE is refused, a super user is not, and an ACL
    granted through the proxy lets the first one in."""
    from trafka.sdk import AclBinding, AclOperation, AclPermissionType, AclResourceType, PatternType

    users = {"alice": "alice-pw", "admin": "admin-pw"}
    with (
        broker_in_thread(
            port=0,
            host="127.0.0.1",
            data_dir=tmp_path_factory.mktemp("proxy-acls"),
            security_protocol="SASL_PLAINTEXT",
            sasl_users=users,
            authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            super_users=("User:admin",),
        ) as secured,
        proxy_in_thread(upstream=(secured.bootstrap_servers,), port=0) as px,
    ):

        def login(user: str) -> dict[str, Any]:
            return {
                "bootstrap_servers": px.bootstrap_servers,
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN",
                "sasl_plain_username": user,
                "sasl_plain_password": users[user],
            }

        async def write(user: str) -> int:
            with anyio.fail_after(30):
                return await produce(user)

        async def produce(user: str) -> int:
            async with open_producer(enable_idempotence=False, **login(user)) as producer:
                return (await producer.send_and_wait("guarded", b"x", key=b"k")).offset

        async def grant() -> None:
            async with open_admin(**login("admin")) as admin:
                binding = AclBinding(
                    AclResourceType.TOPIC, "guarded", PatternType.LITERAL, "User:alice", "*",
                    AclOperation.WRITE, AclPermissionType.ALLOW,
                )  # fmt: skip
                assert (await admin.create_acls([binding])) == {binding: None}

        assert anyio.run(write, "admin", backend="trio") == 0  # auto-creates the topic
        with pytest.raises(Exception) as refused:
            anyio.run(write, "alice", backend="trio")
        assert getattr(refused.value, "code", None) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        anyio.run(grant, backend="trio")
        assert anyio.run(write, "alice", backend="trio") == 1


def _raw_produce(address: tuple[str, int], body: Any, correlation_id: int = 5) -> Any:
    header = protocol.RequestHeader(
        request_api_key=0, request_api_version=9, correlation_id=correlation_id, client_id="raw"
    )
    with socket.create_connection(address, timeout=20) as s:
        s.sendall(protocol.encode_request(header, body))
        reader = FrameReader()
        while (frame := reader.next_frame()) is None:
            chunk = s.recv(65536)
            assert chunk, "the proxy closed the connection"
            reader.feed(chunk)
    return protocol.decode_response(frame, 0, 9)[1]


def test_a_decompression_bomb_is_refused_and_others_carry_on(broker: RunningBroker) -> None:
    """A small gzip batch inflating past max_decompressed_bytes is answered
    MESSAGE_TOO_LARGE without being forwarded; the proxy serves other clients
    meanwhile and its memory stays near the limit, not the bomb's size."""
    import resource
    import threading

    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,), port=0, max_decompressed_bytes=4 * 1024 * 1024
    ) as px:
        topic = fresh()
        create(px.bootstrap_servers, topic, 2)
        confluent_produce(px.bootstrap_servers, topic, 2)  # the proxy learns the topic
        node_port = next(iter(px.statistics.nodes.values()))[1]
        bomb = encode_batch(
            [(0, b"key-%d" % i, b"\0" * (4 << 20), []) for i in range(8)], compression=1
        )
        assert len(bomb) < 400_000  # 32 MiB of records
        body = pm.ProduceRequest(
            acks=-1,
            timeout_ms=5000,
            topic_data=[
                pm.ProduceRequest.TopicProduceData(
                    name=topic,
                    partition_data=[pm.ProduceRequest.PartitionProduceData(index=0, records=bomb)],
                )
            ],
        )
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        results: list[Any] = []
        bombers = [
            threading.Thread(
                target=lambda: results.append(_raw_produce((px.address[0], node_port), body))
            )
            for _ in range(4)
        ]
        for t in bombers:
            t.start()
        confluent_produce(px.bootstrap_servers, topic, 50)  # another client, meanwhile
        for t in bombers:
            t.join(60)
        grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert len(results) == 4
        for answer in results:
            (part,) = answer.responses[0].partition_responses
            assert part.error_code == ErrorCode.MESSAGE_TOO_LARGE
            assert "max_decompressed_bytes" in part.error_message
        assert len(placement(broker.bootstrap_servers, topic, 2)) == 52  # no bomb forwarded
        # Four 32 MiB bombs at once: never inflated whole (this process's peak,
        # clients included, grew by far less than one bomb).
        assert grown_kib < 32 * 1024


def test_a_node_port_that_cannot_be_bound_is_served_on_a_free_one(
    broker: RunningBroker,
) -> None:
    """node_port_base + id taken by another program: the broker is served on a free
    port instead (and the error logged), not the whole proxy brought down."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        node_id = broker.config.node_id
        with proxy_in_thread(
            upstream=(broker.bootstrap_servers,), port=0, node_port_base=taken - node_id
        ) as px:
            topic = fresh()
            create(px.bootstrap_servers, topic, 1)
            confluent_produce(px.bootstrap_servers, topic, 3)
            ((_, served),) = px.statistics.nodes.values()
            assert served != taken
            assert len(placement(broker.bootstrap_servers, topic, 1)) == 3


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_old_protocol_clients_through_the_proxy_are_routed_and_read_back(
    broker: RunningBroker, proxy: RunningProxy
) -> None:
    """Issue #37: kcat without ApiVersions (0.10.2's Produce v2, magic 1 message
    sets) has its keys routed; kafka-python at 0.10.2 (Fetch v3, JoinGroup v1)
    reads them back as a group member, through the proxy."""
    assert KCAT is not None
    topic = fresh()
    create(proxy.bootstrap_servers, topic, 4)
    old = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.10.2"]
    lines = b"".join(b"k%d:value %d\n" % (i % 11, i) for i in range(80))
    subprocess.run(
        [KCAT, "-b", proxy.bootstrap_servers, *old, "-P", "-t", topic, "-K:", "-z", "gzip"],
        input=lines,
        timeout=30,
        check=True,
    )
    records = placement(broker.bootstrap_servers, topic, 4)
    assert len(records) == 80
    assert all(r.partition == murmur2_partition(r.key, 4) for r in records)
    # Some would have gone elsewhere with librdkafka's own CRC32 partitioner.
    assert any(crc32_partition(r.key, 4) != r.partition for r in records)

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=proxy.bootstrap_servers,
        group_id=fresh("old-group"),
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
        api_version=(0, 10, 2),
    )
    try:
        deadline = time.monotonic() + 30
        while consumer.partitions_for_topic(topic) != {0, 1, 2, 3}:
            assert time.monotonic() < deadline, "kafka-python never saw the topic"
            time.sleep(0.05)
        consumer.subscribe([topic])
        got = []
        for message in consumer:
            got.append(message)
            if len(got) == 80:
                break
        consumer.commit()
        committed = {p: consumer.committed(kafka.TopicPartition(topic, p)) for p in range(4)}
    finally:
        consumer.close()
    assert sorted(m.value for m in got) == sorted(b"value %d" % i for i in range(80))
    ends = {p: sum(1 for r in records if r.partition == p) for p in range(4)}
    assert committed == ends


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_two_thousand_idle_connections_neither_stop_others_nor_outlive_their_timeout(
    broker: RunningBroker,
) -> None:
    """2,000 idle client connections: another client is still served (its keyed
    records routed; its round trips and the memory per idle connection printed,
    not judged), none of them costs an upstream connection, and
    connections_max_idle_ms closes them all."""
    idle_ms = 4000
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,), port=0, connections_max_idle_ms=idle_ms
    ) as px:
        topic = fresh()
        create(broker.bootstrap_servers, topic, 4)  # not through the proxy: it has no client
        before = _rss_kib()
        idle = []
        try:
            for _ in range(2000):
                idle.append(socket.create_connection(px.address, timeout=10))
            deadline = time.monotonic() + 30
            while px.statistics.open_connections < 2000 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert px.statistics.open_connections >= 2000
            grown = _rss_kib() - before
            # Silent since they connected: no upstream connection opened for any.
            assert px.statistics.upstream_connections == 0

            async def round_trips() -> list[float]:
                async with open_producer(
                    bootstrap_servers=px.bootstrap_servers, partitioner="consistent_random",
                    linger_ms=0,
                ) as producer:  # fmt: skip
                    took = []
                    for i in range(200):
                        started = time.perf_counter()
                        await producer.send_and_wait(topic, b"v%d" % i, key=b"k%d" % (i % 13))
                        took.append(time.perf_counter() - started)
                    return took

            took = sorted(anyio.run(round_trips, backend="trio"))
            print(
                f"\n2,000 idle connections: {grown / 2000:.1f} KiB each; another client's "
                f"produce round trip p50 {took[100] * 1000:.1f} ms, p99 {took[198] * 1000:.1f} ms"
            )
            records = placement(broker.bootstrap_servers, topic, 4)
            assert len(records) == 200
            assert all(r.partition == murmur2_partition(r.key, 4) for r in records)
            # Every idle connection is closed once idle_ms has passed.
            for sock in idle:
                sock.settimeout(idle_ms / 1000 + 30)
                assert sock.recv(1) == b""
        finally:
            for sock in idle:
                sock.close()
        deadline = time.monotonic() + 30
        while px.statistics.open_connections > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert px.statistics.open_connections == 0
        assert px.statistics.idle_closed >= 2000


def test_an_api_versions_request_newer_than_the_proxy_reads_is_refused_as_a_broker_would(
    proxy: RunningProxy,
) -> None:
    """Kafka 4.x's clients open with ApiVersions v5 (KIP-1242), newer than the
    proxy forwards (its node-id check would be against the proxy's node), so the proxy
    answers it itself as a broker that does not know the version (KIP-511: v0,
    UNSUPPORTED_VERSION, the ApiVersions versions it serves), keeps the
    connection, and the client's retry at the version named is answered."""
    from trafka.codec.messages import k18_api_versions as av
    from trafka.proxy.rewrite import API_VERSIONS_MAX

    newest = API_VERSIONS_MAX
    request = av.ApiVersionsRequest(client_software_name="t", client_software_version="1")
    with socket.create_connection(proxy.address, timeout=20) as sock:
        for correlation_id, version in ((1, newest + 1), (2, newest)):
            header = protocol.RequestHeader(
                request_api_key=18, request_api_version=newest, correlation_id=correlation_id,
                client_id="future",
            )  # fmt: skip
            frame = protocol.encode_request(header, request)
            # The codec cannot write the newer version: its number on the newest's body.
            frame = frame[:6] + version.to_bytes(2, "big") + frame[8:]
            sock.sendall(frame)
            reader = FrameReader()
            while (answer := reader.next_frame()) is None:
                chunk = sock.recv(65536)
                assert chunk, "the proxy closed the connection"
                reader.feed(chunk)
            head, body = protocol.decode_response(answer, 18, 0 if version > newest else version)
            assert head.correlation_id == correlation_id
            if version > newest:
                assert body.error_code == ErrorCode.UNSUPPORTED_VERSION
                assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [
                    (18, 0, newest)
                ]
            else:
                assert body.error_code == 0
                assert {k.api_key for k in body.api_keys} >= {0, 3, 18}
                # The answer forwarded lists ApiVersions up to what the proxy reads
                # (the broker behind serves v5), so no client tries v5 again.
                (mine,) = [k for k in body.api_keys if k.api_key == 18]
                assert mine.max_version == newest
