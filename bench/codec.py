"""Codec benchmark: trafka against kafka-python 3.x (``make bench``).

The workload is a record batch of 1,000 records with 100-byte values (no key, no
headers), uncompressed and lz4-compressed, carried by

* a Produce request (v9, flexible), as a producer sends it, and
* the matching Fetch response (v12, flexible: the last version that names topics
  rather than topic ids), as a consumer receives it.

For each message and compression both libraries do the same work:

* **encode**: build the record batch from the 1,000 records, then encode the
  framed message (size prefix and header included);
* **decode**: decode the framed message, then every record of its batch (CRC
  checked), touching each record's offset, timestamp, key, value and headers.

A third case measures the message codec alone, where record batches play no
part: a Metadata response (v12) describing 100 topics of 10 partitions each, the
answer a client gets from a mid-sized cluster. **encode** is the framed message
from the response object, **decode** the response object from the frame.

Throughput is records per second (messages per second for Metadata). Each
measurement runs the operation in a loop
for at least ``--min-time`` seconds, ``--repeat`` times, and reports the best run
(the one least disturbed by the rest of the machine) and the median. The ratio is
trafka / kafka-python, so above 1 means trafka is faster. Before timing, each
library decodes the other's frames and the records are compared, so the numbers
are for interoperable output.

Record batches are encoded and decoded by ``trafka.codec._speedups`` when that
optional C extension is built; ``TRAFKA_NO_SPEEDUPS=1`` measures the pure-Python
code instead (the header line says which ran).

This is a measurement, not a test: nothing here fails on a slow result.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from kafka.protocol.consumer import FetchResponse as KpFetchResponse
from kafka.protocol.metadata.metadata import MetadataResponse as KpMetadataResponse
from kafka.protocol.producer import ProduceRequest as KpProduceRequest
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kafka.version import __version__ as kafka_python_version

from trafka.codec import _accel, protocol
from trafka.codec.compression import Compression
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.records import decode_records, encode_batch

RECORD_COUNT = 1_000
VALUE_SIZE = 100
TOPIC = "bench"
PRODUCE_VERSION = 9
FETCH_VERSION = 12
BASE_TS = 1_700_000_000_000
KP_BATCH_SIZE = 1 << 22  # large enough that the builder never reports "full"
KP_CODECS = {Compression.NONE: 0, Compression.LZ4: 3}
METADATA_VERSION = 12
METADATA_TOPICS = 100
METADATA_PARTITIONS = 10

Record = tuple[int, bytes | None, bytes, list[tuple[str, bytes]]]


def make_records() -> list[Record]:
    """1,000 records with 100-byte values that compress like real JSON events."""
    rng = random.Random(20240601)
    records: list[Record] = []
    for i in range(RECORD_COUNT):
        text = (
            f'{{"id":{i},"user":"u{rng.randrange(10_000):05d}",'
            f'"amount":{rng.random() * 1000:.2f},"note":"'
        )
        value = (text + "x" * (VALUE_SIZE - len(text) - 2) + '"}').encode()
        assert len(value) == VALUE_SIZE
        records.append((BASE_TS + i, None, value, []))
    return records


# -- trafka ----------------------------------------------------------------------------


def trafka_produce_encode(records: list[Record], codec: Compression) -> bytes:
    batch = encode_batch(records, compression=codec)
    body = produce.ProduceRequest(
        acks=1,
        timeout_ms=30_000,
        topic_data=[
            produce.ProduceRequest.TopicProduceData(
                name=TOPIC,
                partition_data=[
                    produce.ProduceRequest.PartitionProduceData(index=0, records=batch)
                ],
            )
        ],
    )
    header = protocol.RequestHeader(
        request_api_key=0, request_api_version=PRODUCE_VERSION, correlation_id=1, client_id="bench"
    )
    frame: bytes = protocol.encode_request(header, body)
    return frame


def trafka_fetch_encode(records: list[Record], codec: Compression) -> bytes:
    batch = encode_batch(records, compression=codec)
    body = fetch.FetchResponse(
        responses=[
            fetch.FetchResponse.FetchableTopicResponse(
                topic=TOPIC,
                partitions=[
                    fetch.FetchResponse.PartitionData(
                        partition_index=0,
                        high_watermark=RECORD_COUNT,
                        last_stable_offset=RECORD_COUNT,
                        log_start_offset=0,
                        records=batch,
                    )
                ],
            )
        ]
    )
    frame: bytes = protocol.encode_response(1, 1, FETCH_VERSION, body)
    return frame


def _trafka_records(blob: bytes) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_records(blob)]


def trafka_produce_decode(frame: bytes) -> list[tuple[Any, ...]]:
    _, body = protocol.decode_request(memoryview(frame)[4:])
    return _trafka_records(body.topic_data[0].partition_data[0].records)


def trafka_fetch_decode(frame: bytes) -> list[tuple[Any, ...]]:
    _, body = protocol.decode_response(memoryview(frame)[4:], 1, FETCH_VERSION)
    return _trafka_records(body.responses[0].partitions[0].records)


# -- kafka-python ------------------------------------------------------------------------


def _kp_batch(records: list[Record], codec: Compression) -> bytes:
    builder = MemoryRecordsBuilder(
        magic=2, compression_type=KP_CODECS[codec], batch_size=KP_BATCH_SIZE
    )
    for ts, key, value, headers in records:
        builder.append(ts, key, value, headers=headers)
    builder.close()
    return bytes(builder.buffer())


def kp_produce_encode(records: list[Record], codec: Compression) -> bytes:
    batch = _kp_batch(records, codec)
    request_type = KpProduceRequest[PRODUCE_VERSION]
    topic = KpProduceRequest.TopicProduceData
    request = request_type(
        transactional_id=None,
        acks=1,
        timeout_ms=30_000,
        topic_data=[
            topic(name=TOPIC, partition_data=[topic.PartitionProduceData(index=0, records=batch)])
        ],
    )
    request.with_header(correlation_id=1, client_id="bench")
    return bytes(request.encode(framed=True, header=True))


def kp_fetch_encode(records: list[Record], codec: Compression) -> bytes:
    batch = _kp_batch(records, codec)
    topic = KpFetchResponse.FetchableTopicResponse
    response = KpFetchResponse[FETCH_VERSION](
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            topic(
                topic=TOPIC,
                partitions=[
                    topic.PartitionData(
                        partition_index=0,
                        error_code=0,
                        high_watermark=RECORD_COUNT,
                        last_stable_offset=RECORD_COUNT,
                        log_start_offset=0,
                        aborted_transactions=[],
                        preferred_read_replica=-1,
                        records=batch,
                    )
                ],
            )
        ],
    )
    response.with_header(correlation_id=1)
    return bytes(response.encode(framed=True, header=True))


def _kp_records(blob: bytes) -> list[tuple[Any, ...]]:
    out = []
    records = MemoryRecords(blob)
    while records.has_next():
        batch = records.next_batch()
        if not batch.validate_crc():
            raise ValueError("kafka-python: CRC mismatch")
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, tuple(r.headers)))
    return out


def kp_produce_decode(frame: bytes) -> list[tuple[Any, ...]]:
    request = KpProduceRequest.decode(frame, version=PRODUCE_VERSION, header=True, framed=True)
    return _kp_records(request.topic_data[0].partition_data[0].records)


def kp_fetch_decode(frame: bytes) -> list[tuple[Any, ...]]:
    response = KpFetchResponse.decode(frame, version=FETCH_VERSION, header=True, framed=True)
    return _kp_records(response.responses[0].partitions[0].records)


# -- Metadata: the message codec alone ------------------------------------------------------


def make_metadata() -> metadata.MetadataResponse:
    """A Metadata v12 response: 3 brokers, 100 topics of 10 partitions, 3 replicas each."""
    rng = random.Random(20240602)
    resp = metadata.MetadataResponse
    brokers = [
        resp.MetadataResponseBroker(node_id=n, host=f"broker-{n}.example.internal", port=9092)
        for n in range(3)
    ]
    topics = []
    for t in range(METADATA_TOPICS):
        partitions = []
        for p in range(METADATA_PARTITIONS):
            replicas = [(p + r) % 3 for r in range(3)]
            partitions.append(
                resp.MetadataResponsePartition(
                    partition_index=p,
                    leader_id=replicas[0],
                    leader_epoch=rng.randrange(100),
                    replica_nodes=replicas,
                    isr_nodes=replicas,
                )
            )
        topics.append(
            resp.MetadataResponseTopic(
                name=f"orders.events-{t:03d}",
                topic_id=uuid.UUID(int=rng.getrandbits(128)),
                partitions=partitions,
            )
        )
    return resp(brokers=brokers, cluster_id="bench-cluster", controller_id=0, topics=topics)


def trafka_metadata_encode(body: metadata.MetadataResponse) -> bytes:
    frame: bytes = protocol.encode_response(1, 3, METADATA_VERSION, body)
    return frame


def trafka_metadata_decode(frame: bytes) -> metadata.MetadataResponse:
    _, body = protocol.decode_response(memoryview(frame)[4:], 3, METADATA_VERSION)
    return body  # type: ignore[no-any-return]


def kp_metadata_decode(frame: bytes) -> Any:
    return KpMetadataResponse.decode(frame, version=METADATA_VERSION, header=True, framed=True)


def kp_metadata_encode(response: Any) -> bytes:
    return bytes(response.encode(framed=True, header=True))


def _metadata_summary(brokers: Any, topics: Any) -> list[Any]:
    out: list[Any] = [(b.node_id, b.host, b.port, b.rack) for b in brokers]
    for t in topics:
        out.append((t.name, t.topic_id, t.is_internal))
        out += [
            (p.partition_index, p.leader_id, p.leader_epoch, list(p.replica_nodes))
            for p in t.partitions
        ]
    return out


def check_metadata_interop(body: metadata.MetadataResponse) -> Any:
    """Both libraries write the same bytes and read each other's; returns kafka-python's object.

    kafka-python's response object is made by decoding trafka's frame, so both
    encoders start from the same content.
    """
    frame = trafka_metadata_encode(body)
    theirs = kp_metadata_decode(frame)
    if kp_metadata_encode(theirs) != frame:
        raise SystemExit("Metadata: kafka-python re-encodes trafka's frame differently")
    if trafka_metadata_decode(frame) != body:
        raise SystemExit("Metadata: trafka does not decode its own frame back")
    if _metadata_summary(theirs.brokers, theirs.topics) != _metadata_summary(
        body.brokers, body.topics
    ):
        raise SystemExit("Metadata: kafka-python reads different values")
    return theirs


# -- timing ---------------------------------------------------------------------------------


@dataclass
class Timing:
    best: float  # seconds per operation
    median: float


def measure(op: Callable[[], object], repeat: int, min_time: float) -> Timing:
    """Seconds per call of ``op``: best and median of ``repeat`` timed loops."""
    op()  # warm up: compile schemas, fill caches
    loops = 1
    while True:  # calibrate: enough calls per loop to run for min_time
        start = time.perf_counter()
        for _ in range(loops):
            op()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            break
        loops = max(loops * 2, int(loops * min_time / max(elapsed, 1e-9) * 1.1))
    runs = [elapsed / loops]
    for _ in range(repeat - 1):
        start = time.perf_counter()
        for _ in range(loops):
            op()
        runs.append((time.perf_counter() - start) / loops)
    return Timing(min(runs), statistics.median(runs))


def check_interop(records: list[Record]) -> None:
    """Each library decodes the other's frames to the same records."""
    expected = [(i, BASE_TS + i, None, r[2], ()) for i, r in enumerate(records)]
    for codec in (Compression.NONE, Compression.LZ4):
        for encode, decode in (
            (trafka_produce_encode, kp_produce_decode),
            (kp_produce_encode, trafka_produce_decode),
            (trafka_fetch_encode, kp_fetch_decode),
            (kp_fetch_encode, trafka_fetch_decode),
            (trafka_produce_encode, trafka_produce_decode),
            (kp_produce_encode, kp_produce_decode),
        ):
            got = decode(encode(records, codec))
            if got != expected:
                raise SystemExit(
                    f"{encode.__name__} -> {decode.__name__} ({codec.name}): records differ"
                )


def _rate(t: float) -> str:
    return f"{RECORD_COUNT / t:>12,.0f}"


def _msg_rate(t: float) -> str:
    return f"{1 / t:>12,.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="timed loops per measurement")
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds per timed loop")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a check that the benchmark runs, not a measurement: one short loop per "
        "measurement, whatever --repeat and --min-time say (tests/bench/test_bench_smoke.py)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeat, args.min_time = 1, 0.01

    records = make_records()
    check_interop(records)
    print(
        f"trafka codec vs kafka-python {kafka_python_version}: {RECORD_COUNT:,} records x "
        f"{VALUE_SIZE} bytes per message"
    )
    print(
        f"Python {platform.python_version()} on {platform.machine()}; "
        f"best of {args.repeat} runs (median in brackets), records/s; ratio = trafka / kafka-python"
    )
    # The record loops run in C when trafka.codec._speedups is built (TRAFKA_NO_SPEEDUPS=1: off).
    print(f"trafka record batches: {'C speedups' if _accel.speedups else 'pure Python'}")
    print()
    header = f"{'case':<24} {'op':<7} {'trafka':>26} {'kafka-python':>26} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    cases = [
        (
            "Produce v9",
            trafka_produce_encode,
            kp_produce_encode,
            trafka_produce_decode,
            kp_produce_decode,
        ),
        ("Fetch v12", trafka_fetch_encode, kp_fetch_encode, trafka_fetch_decode, kp_fetch_decode),
    ]
    for name, t_enc, k_enc, t_dec, k_dec in cases:
        for codec in (Compression.NONE, Compression.LZ4):
            label = f"{name}, {'uncompressed' if codec == Compression.NONE else 'lz4'}"
            t_frame = t_enc(records, codec)
            k_frame = k_enc(records, codec)
            ops: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
                ("encode", partial(t_enc, records, codec), partial(k_enc, records, codec)),
                ("decode", partial(t_dec, t_frame), partial(k_dec, k_frame)),
            ]
            for op_name, ours, theirs in ops:
                a = measure(ours, args.repeat, args.min_time)
                b = measure(theirs, args.repeat, args.min_time)
                print(
                    f"{label:<24} {op_name:<7} {_rate(a.best)} ({_rate(a.median).strip():>10}) "
                    f"{_rate(b.best)} ({_rate(b.median).strip():>10}) {b.best / a.best:>6.2f}x",
                    flush=True,
                )

    body = make_metadata()
    theirs = check_metadata_interop(body)
    frame = trafka_metadata_encode(body)
    print()
    print(
        f"Metadata v{METADATA_VERSION} response, {METADATA_TOPICS} topics x "
        f"{METADATA_PARTITIONS} partitions ({len(frame):,} bytes); messages/s"
    )
    print("-" * len(header))
    label = f"Metadata v{METADATA_VERSION}"
    meta_ops: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        ("encode", partial(trafka_metadata_encode, body), partial(kp_metadata_encode, theirs)),
        ("decode", partial(trafka_metadata_decode, frame), partial(kp_metadata_decode, frame)),
    ]
    for op_name, ours, other in meta_ops:
        a = measure(ours, args.repeat, args.min_time)
        b = measure(other, args.repeat, args.min_time)
        print(
            f"{label:<24} {op_name:<7} {_msg_rate(a.best)} ({_msg_rate(a.median).strip():>10}) "
            f"{_msg_rate(b.best)} ({_msg_rate(b.median).strip():>10}) {b.best / a.best:>6.2f}x",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
