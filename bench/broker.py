"""brokerlite benchmark: ingest and fetch throughput against plain-socket baselines.

The workload: ``--records`` records (default 1,000,000) of ``--size`` bytes
(default 100), no key, no compression, one partition.

Measured, each in MB/s of record-batch bytes (the size of the partition's log):

* **ingest (confluent-kafka)**: a confluent-kafka producer (acks=1, no
  compression, librdkafka's default batching) sends every record to brokerlite;
  the clock stops when the last delivery report arrives.
* **ingest (raw)**: the same batches, read back from the log, sent as Produce v9
  requests of about 1 MiB with 5 in flight, so that client overhead is not
  what is measured.
* **fetch (confluent-kafka)**: a confluent-kafka consumer reads everything back.
* **fetch (raw)**: Fetch v12 requests of up to 8 MiB, responses read and
  discarded without decoding.
* **append baseline**: a separate plain Python process receives the same bytes
  over loopback TCP and appends them to a file.
* **sendfile baseline**: a separate plain Python process serves the same file
  with ``os.sendfile`` to a client that reads and discards it.

Ratios compare brokerlite with the baselines (targets: ingest >= 50% of the
append baseline, fetch >= 70% of the sendfile baseline). brokerlite runs in its
own process (``trafka broker``), as in production, so that the clients' Python
code does not compete with it for the GIL. This is a measurement, not a test.
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

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from trafka.codec.framing import FrameReader
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response, encode_request

TOPIC = "bench"
RAW_TOPIC = "bench-raw"
MB = 1_000_000
CHUNK = 1 << 20

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


def ingest_confluent(servers: str, records: int, size: int) -> tuple[float, float]:
    """(total seconds, seconds spent in the client's own produce() loop)."""
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "acks": 1,
            "compression.type": "none",
            "enable.idempotence": False,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
        }
    )
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
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    seen = 0
    start = time.perf_counter()
    while seen < records:
        seen += len(consumer.consume(num_messages=100_000, timeout=1.0))
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


class RawClient:
    def __init__(self, servers: str) -> None:
        host, port = servers.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.frames = FrameReader()
        self.corr = 0

    def send(self, key: int, version: int, body: object) -> None:
        self.corr += 1
        header = RequestHeader(
            request_api_key=key, request_api_version=version, correlation_id=self.corr
        )
        self.sock.sendall(encode_request(header, body))

    def frame(self) -> bytes:
        while True:
            frame = self.frames.next_frame()
            if frame is not None:
                return frame
            data = self.sock.recv(4 << 20)
            if not data:
                raise EOFError
            self.frames.feed(data)

    def close(self) -> None:
        self.sock.close()


def ingest_raw(servers: str, data: bytes, in_flight: int = 5) -> float:
    # Split on batch boundaries into ~1 MiB requests.
    requests: list[bytes] = []
    pos = 0
    chunk_start = 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        pos += 12 + length
        if pos - chunk_start >= CHUNK or pos == len(data):
            requests.append(data[chunk_start:pos])
            chunk_start = pos
    client = RawClient(servers)
    start = time.perf_counter()
    pending = 0
    for records in requests:
        body = produce.ProduceRequest(
            acks=1,
            timeout_ms=30_000,
            topic_data=[
                produce.ProduceRequest.TopicProduceData(
                    name=RAW_TOPIC,
                    partition_data=[
                        produce.ProduceRequest.PartitionProduceData(index=0, records=records)
                    ],
                )
            ],
        )
        client.send(0, 9, body)
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
    code = response.responses[0].partition_responses[0].error_code
    if code:
        raise RuntimeError(f"raw produce failed with error {code}")


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()

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
                f"brokerlite benchmark: {args.records:,} records of {args.size} bytes, "
                f"Python {sys.version.split()[0]}",
                flush=True,
            )
            ingest_s, loop_s = ingest_confluent(servers, args.records, args.size)
            files = log_files(data_dir, TOPIC)
            data = b"".join(f.read_bytes() for f in files)
            nbytes = len(data)
            fetch_s = fetch_confluent(servers, args.records)
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
        "ingest (raw Produce, 1 MiB, 5 in flight)": Result("raw ingest", nbytes, raw_ingest_s),
        "append baseline (TCP -> file)": Result("append", nbytes, append_s),
        "fetch (confluent-kafka consumer)": Result("fetch", nbytes, fetch_s),
        "fetch (raw Fetch, 8 MiB)": Result("raw fetch", nbytes, raw_fetch_s),
        "sendfile baseline (file -> TCP)": Result("sendfile", nbytes, sendfile_s),
    }
    print(f"{nbytes / MB:.1f} MB of record batches")
    print(
        f"(the confluent-kafka producer spent {loop_s:.2f} s of its {ingest_s:.2f} s in its own "
        "Python produce() loop)\n"
    )
    for name, result in results.items():
        print(f"  {name:<42} {result.mb_per_s:9.1f} MB/s  ({result.seconds:.2f} s)")
    append_rate = results["append baseline (TCP -> file)"].mb_per_s
    sendfile_rate = results["sendfile baseline (file -> TCP)"].mb_per_s
    print()
    for name in ("ingest (confluent-kafka producer)", "ingest (raw Produce, 1 MiB, 5 in flight)"):
        ratio = results[name].mb_per_s / append_rate
        print(f"  {name:<42} {ratio:6.1%} of the append baseline (target >= 50%)")
    for name in ("fetch (confluent-kafka consumer)", "fetch (raw Fetch, 8 MiB)"):
        ratio = results[name].mb_per_s / sendfile_rate
        print(f"  {name:<42} {ratio:6.1%} of the sendfile baseline (target >= 70%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
