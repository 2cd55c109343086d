"""Helpers of the proxy tests: topics, records in and out, and Produce requests made by hand."""

from __future__ import annotations

import socket
import struct
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import confluent_kafka
from unique_names import names as _names

from trafka.codec import ErrorCode, KafkaError, protocol
from trafka.codec.messages import k00_produce as pm
from trafka.codec.messages import k22_init_producer_id as ip
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.produce_response import ProduceAnswer, read_produce_response
from trafka.codec.records import decode_batch, encode_batch, iter_batches
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer
from trafka.sdk.partitioners import crc32_partition


def fresh(prefix: str = "px") -> str:
    return f"{prefix}-{next(_names)}"


def create(
    servers: str,
    topic: str,
    partitions: int,
    replicas: int = -1,
    configs: dict[str, str] | None = None,
    *,
    served: bool = False,
) -> None:
    """The topic created; with ``served``, and served: Apache Kafka answers
    CreateTopics before every leader serves its partitions, so this then
    returns once each answers a ListOffsets (acks=0 records sent earlier would
    be lost, and plain producers' retries would write records twice)."""

    async def go() -> None:
        with anyio.fail_after(60):
            async with open_admin(bootstrap_servers=servers) as admin:
                await admin.create_topics([NewTopic(topic, partitions, replicas, configs or {})])
                if not served:
                    return
                tps = [TopicPartition(topic, p) for p in range(partitions)]
                # The broker asked may not know the topic yet either (the SDK
                # takes that answer as final; Java's admin retries it).
                while True:
                    try:
                        await admin.list_offsets(dict.fromkeys(tps, "latest"))
                        return
                    except KafkaError as exc:
                        if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                            raise
                    await anyio.sleep(0.1)

    anyio.run(go, backend="trio")


def placement(servers: str, topic: str, partitions: int, **settings: Any) -> list[Any]:
    """Every record of the topic, read to its end (read_committed with ``settings``)."""
    # Closing waits for the fetch the broker holds at the log's end (one request at
    # a time on a connection, as Kafka answers): 50 ms rather than 500.
    settings.setdefault("fetch_max_wait_ms", 50)

    async def go() -> list[Any]:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        out: list[Any] = []
        async with open_consumer(bootstrap_servers=servers, **settings) as consumer:
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            with anyio.fail_after(30):
                for tp in tps:
                    while await consumer.position(tp) < ends[tp]:
                        for recs in (await consumer.getmany(tp, timeout_ms=500)).values():
                            out.extend(recs)
        return out

    result: list[Any] = anyio.run(go, backend="trio")
    return result


# A delivery report: (the record's value, the partition named, the offset named;
# None or negative: no offset).
Report = tuple[bytes, int, int | None]


def misreported(records: Sequence[Any], reports: Sequence[Report]) -> str | None:
    """What is wrong with ``reports`` against ``records`` (every record of the
    topic, as the broker has them), or None: a report names no offset, or the
    one its record has in the partition it names; no (partition, offset) is
    named twice; none is past its partition's last record (issue #51)."""
    at = {(r.partition, r.offset): r.value for r in records}
    last: dict[int, int] = {}
    for r in records:
        last[r.partition] = max(last.get(r.partition, -1), r.offset)
    known = [(v, p, o) for v, p, o in reports if o is not None and o >= 0]
    wrong = [(v, p, o) for v, p, o in known if at.get((p, o)) != v]
    twice = [k for k, n in Counter((p, o) for _, p, o in known).items() if n > 1]
    past = [(v, p, o) for v, p, o in known if o > last.get(p, -1)]
    if not (wrong or twice or past):
        return None
    return (
        f"of {len(reports)} reports: {len(wrong)} name a place where their record is not, "
        f"{len(twice)} places are named more than once, {len(past)} are past their "
        f"partition's last record; first wrong: {wrong[:3]}"
    )


def confluent_reports(
    proxy: Any, topic: str, sends: Sequence[tuple[bytes, bytes]], **settings: Any
) -> list[Report]:
    """The delivery reports of confluent-kafka sending ``sends`` (value, key), in
    one transaction when ``settings`` name a ``transactional.id``."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": proxy.bootstrap_servers, "linger.ms": 5, **settings}
    )
    reports: list[Report] = []
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err:
            errors.append(err)
        else:
            reports.append((msg.value(), msg.partition(), msg.offset()))

    transactional = "transactional.id" in settings
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    for value, key in sends:
        producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
    if transactional:
        producer.commit_transaction(30)
    assert producer.flush(30) == 0
    assert errors == []
    assert len(reports) == len(sends)
    return reports


def kafka_python_reports(
    servers: str, topic: str, sends: Sequence[tuple[bytes, bytes]], **settings: Any
) -> list[Report]:
    """The delivery reports of kafka-python sending ``sends`` (value, key), each
    to the partition librdkafka's CRC32 would choose (not murmur2's), in one
    transaction when ``settings`` name a ``transactional_id``."""
    import kafka

    producer = kafka.KafkaProducer(bootstrap_servers=servers, linger_ms=5, **settings)
    try:
        count = len(producer.partitions_for(topic))  # waits for the topic's metadata
        transactional = "transactional_id" in settings
        if transactional:
            producer.init_transactions()
            producer.begin_transaction()
        futures = [
            (
                value,
                producer.send(topic, value=value, key=key, partition=crc32_partition(key, count)),
            )
            for value, key in sends
        ]
        producer.flush(30)
        if transactional:
            producer.commit_transaction()
        got = [(value, future.get(timeout=30)) for value, future in futures]
    finally:
        producer.close(timeout=30)
    return [(value, m.partition, m.offset) for value, m in got]


def crc32_like(key: bytes, all_partitions: list[int], available: list[int]) -> int:
    """aiokafka's partitioner signature, placing keys as librdkafka does."""
    return sorted(all_partitions)[crc32_partition(key, len(all_partitions))]


def aiokafka_reports(
    servers: str, topic: str, sends: Sequence[tuple[bytes, bytes]], **settings: Any
) -> list[Report]:
    """The delivery reports of aiokafka sending ``sends`` (value, key) with
    librdkafka's CRC32 partitioner, in one transaction when ``settings`` name a
    ``transactional_id``."""
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def go() -> list[Report]:
        producer = AIOKafkaProducer(
            bootstrap_servers=servers, partitioner=crc32_like, linger_ms=5, **settings
        )
        await producer.start()
        try:
            async with asyncio.timeout(60):
                transactional = "transactional_id" in settings
                if transactional:
                    await producer.begin_transaction()
                futures = [
                    (value, await producer.send(topic, value, key=key)) for value, key in sends
                ]
                await producer.flush()
                if transactional:
                    await producer.commit_transaction()
                out: list[Report] = []
                for value, future in futures:
                    m = await future
                    out.append((value, m.partition, m.offset))
                return out
        finally:
            await producer.stop()

    return asyncio.run(go())


def sdk_reports(
    servers: str, topic: str, sends: Sequence[tuple[bytes, bytes]], **settings: Any
) -> list[Report]:
    """The delivery reports of trafka's SDK sending ``sends`` (value, key) with
    librdkafka's CRC32 partitioner, in one transaction when ``settings`` name a
    ``transactional_id``."""

    async def go() -> list[Report]:
        with anyio.fail_after(60):
            async with open_producer(
                bootstrap_servers=servers, partitioner="consistent_random", linger_ms=5, **settings
            ) as producer:
                transactional = "transactional_id" in settings
                if transactional:
                    await producer.init_transactions()
                    producer.begin_transaction()
                futures = [
                    (value, await producer.send(topic, value, key=key)) for value, key in sends
                ]
                await producer.flush()
                if transactional:
                    await producer.commit_transaction()
                out: list[Report] = []
                for value, future in futures:
                    m = await future
                    out.append((value, m.partition, m.offset))
                return out

    result: list[Report] = anyio.run(go, backend="trio")
    return result


def confluent_produce(servers: str, topic: str, n: int, **settings: Any) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": servers, "linger.ms": 5, **settings})
    failures: list[Any] = []
    for i in range(n):
        producer.produce(
            topic,
            value=b"v%d" % i,
            key=b"user-%d" % (i % 23),
            on_delivery=lambda err, _msg: failures.append(err) if err else None,
        )
    assert producer.flush(30) == 0
    assert failures == []


def keyed(n: int, *, keys: int = 13, null_every: int = 0) -> list[tuple[int, Any, bytes, Any]]:
    out = []
    for i in range(n):
        key = None if null_every and i % null_every == 0 else b"key-%d" % (i % keys)
        out.append((1_000 + i, key, b"value-%d" % i, [("n", b"%d" % i)]))
    return out


def request(parts: dict[int, list[bytes]], *, acks: int = -1, topic: str = "orders") -> Any:
    return pm.ProduceRequest(
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            pm.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    pm.ProduceRequest.PartitionProduceData(index=i, records=b"".join(blobs))
                    for i, blobs in parts.items()
                ],
            )
        ],
    )


def records_of(body: Any) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for t in body.topic_data:
        for p in t.partition_data:
            for _, raw in iter_batches(p.records):
                out.setdefault(p.index, []).extend(decode_batch(bytes(raw)).records)
    return out


def answer(body: Any, errors: dict[int, int] | None = None) -> Any:
    """A broker's answer to a Produce request: partition p's records at offset
    100 * p, with the error ``errors`` gives it (else none)."""
    r = pm.ProduceResponse
    return r(
        responses=[
            r.TopicProduceResponse(
                name=t.name,
                partition_responses=[
                    r.PartitionProduceResponse(
                        index=p.index,
                        error_code=(errors or {}).get(p.index, 0),
                        base_offset=100 * p.index,
                        log_start_offset=0,
                    )
                    for p in t.partition_data
                ],
            )
            for t in body.topic_data
        ]
    )


def read_answer(body: Any, version: int = 11) -> ProduceAnswer:
    """A broker's answer (a ProduceResponse) as the proxy reads it: on its bytes."""
    return read_produce_response(protocol.encode_response(1, 0, version, body)[4:], version)


def call(sock: socket.socket, key: int, version: int, body: Any) -> Any:
    """One request and its answer, on a blocking socket (its timeout the deadline)."""
    header = RequestHeader(
        request_api_key=key, request_api_version=version, correlation_id=7, client_id="rule"
    )
    sock.sendall(protocol.encode_request(header, body))
    (size,) = struct.unpack(">i", _exactly(sock, 4))
    return protocol.decode_response(_exactly(sock, size), key, version)[1]


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the proxy closed the connection"
        data += chunk
    return data


INIT_PRODUCER_ID = ip.InitProducerIdRequest(
    transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
)


def produce_batch(
    sock: socket.socket,
    topic: str,
    producer: Any,
    records: list[Any],
    base: int,
    partition: int = 0,
) -> list[int]:
    """Produce ``records`` to ``partition`` as one batch of ``producer`` (an
    InitProducerId answer) at ``base``; the partitions' errors."""
    batch = encode_batch(
        records,
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
        base_sequence=base,
    )
    answer = call(sock, 0, 9, request({partition: [batch]}, topic=topic))
    return [p.error_code for t in answer.responses for p in t.partition_responses]


def free_port() -> int:
    """A loopback port free a moment ago (for a listener the test names in advance)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_until(done: Callable[[], bool], seconds: float = 30) -> None:
    """Wait for ``done()`` to hold (the proxy's own task makes it so), as long as
    ``seconds`` at most (a deadline, not a measurement)."""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.01)
