"""brokerlite benchmark: ingest and fetch throughput against plain-socket baselines.

The workload: ``--records`` records (default 1,000,000) of ``--size`` bytes
(default 100), no key, no compression, one partition.

Measured, each in MB/s of record-batch bytes (the size of the partition's log):

* **ingest (confluent-kafka)**: a confluent-kafka producer (acks=1, no
  compression, librdkafka's default batching) sends every record to brokerlite;
  the clock stops when the last delivery report arrives.
* **ingest (raw)**: the same batches, read back from the log, sent as Produce v9
  requests with 5 in flight, so that client overhead is not what is measured.
  Each request carries one batch, as the producer sent it: Kafka takes one
  record batch per partition and request (more is INVALID_RECORD), so the
  requests are as large as librdkafka's batches (up to ``batch.size``, 1 MB).
* **fetch (confluent-kafka)**: a confluent-kafka consumer reads everything back.
* **fetch (raw)**: Fetch v12 requests of up to 8 MiB, responses read and
  discarded without decoding.
* **append baseline**: a separate plain Python process receives the same bytes
  over loopback TCP and appends them to a file.
* **sendfile baseline**: a separate plain Python process serves the same file
  with ``os.sendfile`` to a client that reads and discards it.

Ratios compare brokerlite with the baselines (targets: ingest >= 50% of the
append baseline, fetch >= 70% of the sendfile baseline).

The round-trip section (``--sections latency``) measures per-request latency,
what a chain of dependent requests (a transaction's last Produce, then EndTxn)
pays on every hop, in microseconds per round trip:

* **ApiVersions v3**, **Produce v9, acks=1, one 10-record batch** and
  **OffsetCommit v8** (one partition, outside a group generation; brokerlite
  fsyncs its offset journal before it answers): a raw client sends
  ``--round-trips`` requests one at a time (the next only after the previous
  response arrived), after a warm-up.
* **echo baseline**: a separate plain Python process reads each request frame
  and answers with a frame of the size brokerlite answered with, to the same
  client code sending the same bytes. It is the floor set by loopback TCP, the
  two processes' wake-ups and the client, so the ratio shows what brokerlite
  itself adds.

brokerlite runs in its own process (``trafka broker``), as in production, so
that the clients' Python code does not compete with it for the GIL. This is a
measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _raw import RawClient  # bench/ is the script's directory
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from trafka.codec import ErrorCode
from trafka.codec.framing import FrameReader
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k08_offset_commit as offset_commit
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k19_create_topics as create_topics
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response, encode_request, peek_correlation_id
from trafka.codec.records import encode_batch

TOPIC = "bench"
RAW_TOPIC = "bench-raw"
LATENCY_TOPIC = "bench-latency"
MB = 1_000_000
CHUNK = 1 << 20
SMOKE_HELP = (
    "a check that the benchmark runs, not a measurement: tiny sizes (2,000 records, "
    "50 round trips), whatever the other options say (tests/bench/test_bench_smoke.py)"
)

APPEND_SERVER = r"""
import os, socket, sys, time
path = sys.argv[1]
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
buf = bytearray(1 << 20)
view = memoryview(buf)
total = 0
while True:
    n = conn.recv_into(buf)
    if not n:
        break
    os.write(fd, view[:n])
    total += n
os.close(fd)
conn.sendall(b"done")
conn.close()
"""

SENDFILE_SERVER = r"""
import os, socket, sys
path = sys.argv[1]
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
offset = 0
while offset < size:
    offset += os.sendfile(conn.fileno(), fd, offset, size - offset)
os.close(fd)
conn.close()
"""


# Answers every request frame with a frame of the size announced by the
# connection's first 4 bytes, the way a server with no work to do would.
ECHO_SERVER = r"""
import socket, struct
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
while True:
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    reply = None
    while True:
        data = conn.recv(256 * 1024)
        if not data:
            break
        buf += data
        if reply is None:
            if len(buf) < 4:
                continue
            (reply_size,) = struct.unpack_from(">i", buf)
            reply = struct.pack(">i", reply_size - 4) + bytes(reply_size - 4)
            buf = buf[4:]
        while len(buf) >= 4:
            (size,) = struct.unpack_from(">i", buf)
            if len(buf) < 4 + size:
                break
            buf = buf[4 + size :]
            conn.sendall(reply)
    conn.close()
"""


@dataclass
class Result:
    name: str
    nbytes: int
    seconds: float

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / MB / self.seconds


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trafka.tools.cli",
            "broker",
            "--no-announce",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(data_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        match = re.search(r"ready on (127\.0\.0\.1:\d+)", line)
        if match:
            return proc, match.group(1)
    raise RuntimeError("the broker did not start")


def log_files(data_dir: Path, topic: str) -> list[Path]:
    return sorted((data_dir / f"{topic}-0").glob("*.log"))


def ingest_confluent(
    servers: str, records: int, size: int, batch_size: int | None = None
) -> tuple[float, float]:
    """(total seconds, seconds spent in the client's own produce() loop).

    ``batch_size``: librdkafka's ``batch.size`` (None: its default, 1 MB)."""
    config: dict[str, str | int] = {
        "bootstrap.servers": servers,
        "acks": 1,
        "compression.type": "none",
        "enable.idempotence": False,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000,
    }
    if batch_size is not None:
        config["batch.size"] = batch_size
    producer = Producer(config)
    value = b"x" * size
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(TOPIC, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    loop = time.perf_counter() - start
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    del producer  # disconnect now, not when the broker is gone
    if remaining:
        raise RuntimeError(f"{remaining} records were not delivered")
    return elapsed, loop


def fetch_confluent(servers: str, records: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * MB,
            "max.partition.fetch.bytes": 8 * MB,
            "queued.min.messages": 1_000_000,
            # librdkafka pauses fetching for fetch.queue.backoff.ms (default 1000)
            # once its queue is full (queued.max.messages.kbytes, 64 MiB); the
            # default made this reader wait about 4 of its 5 seconds.
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    seen = 0
    start = time.perf_counter()
    while seen < records:
        # No more than what is left: consume() waits its whole timeout for a
        # num_messages that never comes, which would end every run with a 1 s wait.
        seen += len(consumer.consume(num_messages=min(100_000, records - seen), timeout=1.0))
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def produce_acks_1(topic: str, records: bytes) -> produce.ProduceRequest:
    """An acks=1 Produce request of ``records`` for partition 0 of ``topic``."""
    return produce.ProduceRequest(
        acks=1,
        timeout_ms=30_000,
        topic_data=[
            produce.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    produce.ProduceRequest.PartitionProduceData(index=0, records=records)
                ],
            )
        ],
    )


def ingest_raw(servers: str, data: bytes, in_flight: int = 5) -> float:
    # One batch per request: Kafka's log validation refuses a partition's records
    # holding more than one magic 2 batch (INVALID_RECORD), and so does brokerlite.
    requests: list[bytes] = []
    pos = 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        requests.append(data[pos : pos + 12 + length])
        pos += 12 + length
    client = RawClient(servers)
    start = time.perf_counter()
    pending = 0
    for records in requests:
        client.send(0, 9, produce_acks_1(RAW_TOPIC, records))
        pending += 1
        if pending >= in_flight:
            check_produce(client.frame())
            pending -= 1
    while pending:
        check_produce(client.frame())
        pending -= 1
    elapsed = time.perf_counter() - start
    client.close()
    return elapsed


def check_produce(frame: bytes) -> None:
    _, response = decode_response(frame, 0, 9)
    partition = response.responses[0].partition_responses[0]
    if partition.error_code:
        name = ErrorCode(partition.error_code).name
        raise RuntimeError(
            f"raw produce failed with error {partition.error_code} ({name}): "
            f"{partition.error_message}"
        )


def count_batches(data: bytes) -> int:
    count = pos = 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        pos += 12 + length
        count += 1
    return count


def fetch_raw(servers: str, data: bytes, partition_max: int = 8 * MB) -> float:
    """Fetch everything with raw requests, reading responses into one reused buffer.

    The batch boundaries come from the log itself, so the client knows each
    response's next offset without decoding it (the broker returns whole
    batches up to ``partition_max``, at least one), and checks the size.
    """
    batches: list[tuple[int, int]] = []  # (base offset, size)
    pos = 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        batches.append((base, 12 + length))
        pos += 12 + length
    client = RawClient(servers)
    buf = bytearray(4 << 20)
    view = memoryview(buf)
    i = 0
    start = time.perf_counter()
    while i < len(batches):
        j, expected = i, 0
        while j < len(batches) and (j == i or expected + batches[j][1] <= partition_max):
            expected += batches[j][1]
            j += 1
        body = fetch.FetchRequest(
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=64 * MB,
            topics=[
                fetch.FetchRequest.FetchTopic(
                    topic=TOPIC,
                    partitions=[
                        fetch.FetchRequest.FetchPartition(
                            partition=0,
                            fetch_offset=batches[i][0],
                            partition_max_bytes=partition_max,
                        )
                    ],
                )
            ],
        )
        client.send(1, 12, body)
        (size,) = struct.unpack(">i", read_exactly(client.sock, 4))
        if not expected <= size <= expected + 256:
            raise RuntimeError(f"a fetch returned {size} bytes, expected {expected} of records")
        left = size
        while left:
            n = client.sock.recv_into(view[: min(left, len(buf))])
            if not n:
                raise EOFError
            left -= n
        i = j
    elapsed = time.perf_counter() - start
    client.close()
    return elapsed


def read_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def append_baseline(data: bytes, directory: Path) -> float:
    server = subprocess.Popen(
        [sys.executable, "-c", APPEND_SERVER, str(directory / "append.bin")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    port = int(server.stdout.readline())
    sock = socket.create_connection(("127.0.0.1", port))
    view = memoryview(data)
    start = time.perf_counter()
    for pos in range(0, len(data), CHUNK):
        sock.sendall(view[pos : pos + CHUNK])
    sock.shutdown(socket.SHUT_WR)
    ack = sock.recv(16)
    elapsed = time.perf_counter() - start
    sock.close()
    server.wait(30)
    if ack != b"done":
        raise RuntimeError("append baseline failed")
    return elapsed


def sendfile_baseline(path: Path, nbytes: int) -> float:
    server = subprocess.Popen(
        [sys.executable, "-c", SENDFILE_SERVER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    port = int(server.stdout.readline())
    sock = socket.create_connection(("127.0.0.1", port))
    buf = bytearray(4 << 20)
    received = 0
    start = time.perf_counter()
    while True:
        n = sock.recv_into(buf)
        if not n:
            break
        received += n
    elapsed = time.perf_counter() - start
    sock.close()
    server.wait(30)
    if received != nbytes:
        raise RuntimeError(f"sendfile baseline got {received} of {nbytes} bytes")
    return elapsed


@dataclass
class RoundTrips:
    name: str
    request_size: int
    response_size: int
    micros: list[float]  # one per timed round trip

    @property
    def mean(self) -> float:
        return sum(self.micros) / len(self.micros)

    @property
    def median(self) -> float:
        return sorted(self.micros)[len(self.micros) // 2]


def latency_requests(count: int) -> dict[str, list[tuple[int, int, bytes]]]:
    """Per workload, ``count`` encoded requests as (api key, version, frame)."""
    batch = encode_batch(
        [(1_700_000_000_000 + i, None, b"v" * 50, ()) for i in range(10)], compression=0
    )
    produce_body = produce_acks_1(LATENCY_TOPIC, batch)
    oc = offset_commit.OffsetCommitRequest
    # A commit outside any group generation (as a consumer without a group
    # protocol makes it): brokerlite fsyncs its offset journal before answering.
    commit_body = oc(
        group_id="bench-latency",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            oc.OffsetCommitRequestTopic(
                name=LATENCY_TOPIC,
                partitions=[oc.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)],
            )
        ],
    )
    workloads = {
        "ApiVersions v3": (
            18,
            3,
            api_versions.ApiVersionsRequest(
                client_software_name="bench", client_software_version="1"
            ),
        ),
        "Produce v9 acks=1 (10 x 50 B)": (0, 9, produce_body),
        "OffsetCommit v8 (fsynced)": (8, 8, commit_body),
    }
    out: dict[str, list[tuple[int, int, bytes]]] = {}
    for name, (key, version, body) in workloads.items():
        out[name] = [
            (
                key,
                version,
                encode_request(
                    RequestHeader(
                        request_api_key=key,
                        request_api_version=version,
                        correlation_id=corr,
                        client_id="bench",
                    ),
                    body,
                ),
            )
            for corr in range(1, count + 1)
        ]
    return out


def serial_round_trips(
    sock: socket.socket, requests: list[bytes]
) -> tuple[list[float], list[bytes]]:
    """Send each request after the previous response: (microseconds each, responses)."""
    frames = FrameReader()
    micros: list[float] = []
    responses: list[bytes] = []
    clock = time.perf_counter_ns
    for request in requests:
        start = clock()
        sock.sendall(request)
        frame = frames.next_frame()
        while frame is None:
            data = sock.recv(1 << 20)
            if not data:
                raise EOFError("the server closed the connection")
            frames.feed(data)
            frame = frames.next_frame()
        micros.append((clock() - start) / 1000)
        responses.append(frame)
    return micros, responses


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def round_trips(servers: str, count: int, warmup: int) -> list[tuple[RoundTrips, RoundTrips]]:
    """(brokerlite, echo baseline) per workload, measured in the same run."""
    port = int(servers.rsplit(":", 1)[1])
    create = RawClient(servers)
    created = create.request(
        19,
        7,
        create_topics.CreateTopicsRequest(
            topics=[
                create_topics.CreateTopicsRequest.CreatableTopic(
                    name=LATENCY_TOPIC, num_partitions=1, replication_factor=1
                )
            ]
        ),
    )
    if created.topics[0].error_code:
        raise RuntimeError(f"creating {LATENCY_TOPIC} failed: {created.topics[0].error_code}")
    create.close()

    echo = subprocess.Popen([sys.executable, "-c", ECHO_SERVER], stdout=subprocess.PIPE, text=True)
    assert echo.stdout is not None
    echo_port = int(echo.stdout.readline())
    results = []
    try:
        for name, requests in latency_requests(warmup + count).items():
            key, version, _ = requests[0]
            frames = [frame for _, _, frame in requests]
            sock = connect(port)
            serial_round_trips(sock, frames[:warmup])
            broker_micros, responses = serial_round_trips(sock, frames[warmup:])
            sock.close()
            for corr, response in enumerate(responses, warmup + 1):
                if peek_correlation_id(response) != corr:
                    raise RuntimeError(f"{name}: response {corr} out of order")
            _, body = decode_response(responses[-1], key, version)
            if key == 18:
                code = body.error_code
            elif key == 8:
                code = body.topics[0].partitions[0].error_code
            else:
                code = body.responses[0].partition_responses[0].error_code
            if code:
                raise RuntimeError(f"{name}: brokerlite answered with error {code}")
            response_size = 4 + len(responses[-1])
            sock = connect(echo_port)
            sock.sendall(struct.pack(">i", response_size))
            serial_round_trips(sock, frames[:warmup])
            echo_micros, echoed = serial_round_trips(sock, frames[warmup:])
            sock.close()
            if {len(frame) for frame in echoed} != {response_size - 4}:
                raise RuntimeError("the echo baseline answered with the wrong size")
            request_size = len(frames[0])
            results.append(
                (
                    RoundTrips(name, request_size, response_size, broker_micros),
                    RoundTrips(name, request_size, response_size, echo_micros),
                )
            )
    finally:
        echo.terminate()
        echo.wait(30)
    return results


def print_round_trips(results: list[tuple[RoundTrips, RoundTrips]], count: int) -> None:
    print(f"\nrequest round trip: {count:,} serial requests each, microseconds per round trip\n")
    for broker, echo in results:
        print(
            f"  {broker.name:<30} request {broker.request_size:4d} B, "
            f"response {broker.response_size:4d} B"
        )
        print(f"    {'brokerlite':<28} mean {broker.mean:7.1f} us  median {broker.median:7.1f} us")
        print(f"    {'echo baseline':<28} mean {echo.mean:7.1f} us  median {echo.median:7.1f} us")
        print(
            f"    {'brokerlite / baseline':<28} mean {broker.mean / echo.mean:6.2f}x  "
            f"median {broker.median / echo.median:6.2f}x  "
            f"(brokerlite adds {broker.median - echo.median:.1f} us at the median)"
        )


def throughput(records: int, size: int, batch_size: int | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="trafka-bench-") as tmp:
        tmp_dir = Path(tmp)
        data_dir = tmp_dir / "data"
        proc, servers = start_broker(data_dir)
        try:
            admin = AdminClient({"bootstrap.servers": servers})
            for future in admin.create_topics(
                [NewTopic(TOPIC, 1, 1), NewTopic(RAW_TOPIC, 1, 1)]
            ).values():
                future.result(30)
            del admin
            print(
                f"brokerlite benchmark: {records:,} records of {size} bytes, "
                f"Python {sys.version.split()[0]}",
                flush=True,
            )
            ingest_s, loop_s = ingest_confluent(servers, records, size, batch_size)
            files = log_files(data_dir, TOPIC)
            data = b"".join(f.read_bytes() for f in files)
            nbytes = len(data)
            fetch_s = fetch_confluent(servers, records)
            raw_ingest_s = ingest_raw(servers, data)
            raw_fetch_s = fetch_raw(servers, data)
        finally:
            proc.terminate()
            proc.wait(30)
        single = tmp_dir / "log.bin"
        single.write_bytes(data)
        append_s = append_baseline(data, tmp_dir)
        sendfile_s = sendfile_baseline(single, nbytes)

    results = {
        "ingest (confluent-kafka producer)": Result("ingest", nbytes, ingest_s),
        "ingest (raw Produce, 5 in flight)": Result("raw ingest", nbytes, raw_ingest_s),
        "append baseline (TCP -> file)": Result("append", nbytes, append_s),
        "fetch (confluent-kafka consumer)": Result("fetch", nbytes, fetch_s),
        "fetch (raw Fetch, 8 MiB)": Result("raw fetch", nbytes, raw_fetch_s),
        "sendfile baseline (file -> TCP)": Result("sendfile", nbytes, sendfile_s),
    }
    print(f"{nbytes / MB:.1f} MB of record batches ({count_batches(data):,} batches)")
    print(
        f"(the confluent-kafka producer spent {loop_s:.2f} s of its {ingest_s:.2f} s in its own "
        "Python produce() loop)\n"
    )
    for name, result in results.items():
        print(f"  {name:<42} {result.mb_per_s:9.1f} MB/s  ({result.seconds:.2f} s)")
    append_rate = results["append baseline (TCP -> file)"].mb_per_s
    sendfile_rate = results["sendfile baseline (file -> TCP)"].mb_per_s
    print()
    for name in ("ingest (confluent-kafka producer)", "ingest (raw Produce, 5 in flight)"):
        ratio = results[name].mb_per_s / append_rate
        print(f"  {name:<42} {ratio:6.1%} of the append baseline (target >= 50%)")
    for name in ("fetch (confluent-kafka consumer)", "fetch (raw Fetch, 8 MiB)"):
        ratio = results[name].mb_per_s / sendfile_rate
        print(f"  {name:<42} {ratio:6.1%} of the sendfile baseline (target >= 70%)")


def latency(count: int, warmup: int) -> None:
    with tempfile.TemporaryDirectory(prefix="trafka-bench-") as tmp:
        proc, servers = start_broker(Path(tmp) / "data")
        try:
            results = round_trips(servers, count, warmup)
        finally:
            proc.terminate()
            proc.wait(30)
    print_round_trips(results, count)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument(
        "--sections",
        default="throughput,latency",
        help="comma-separated: throughput (MB/s), latency (request round trips)",
    )
    parser.add_argument("--round-trips", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if args.smoke:
        args.records, args.round_trips, args.warmup = 2_000, 50, 10
    sections = {name.strip() for name in args.sections.split(",") if name.strip()}
    unknown = sections - {"throughput", "latency"}
    if unknown:
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    if "throughput" in sections:
        # Small batches in a smoke run, so that its few records still make several
        # (the raw paths then send and fetch more than one).
        throughput(args.records, args.size, 16_384 if args.smoke else None)
    if "latency" in sections:
        latency(args.round_trips, args.warmup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
