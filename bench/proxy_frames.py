"""What a forwarded request costs ``trafka proxy`` (issue #66): its CPU per
request when nothing is decoded, apart from what the client and broker do.

One single-node brokerlite process and one ``trafka proxy --route-keys none``
process (``trafka broker``, ``trafka proxy``, as in production; bench/proxy.py
starts them). A raw client on plain sockets keeps ``--window`` Produce requests
in flight (acks=1, one batch of ``--batch`` records of 100 bytes each, to one
partition; written ``--window`` at a time, as a pipelining producer's arrive),
``--requests`` of them, first directly, then through the proxy (each warmed
up by 100 requests first, not measured: the proxy compiles the codec's schemas
at their first use). Printed, per
path: requests per second, and the CPU seconds per 10,000 requests of the proxy
and the broker (``/proc/<pid>/stat``). The proxy's CPU per request holds better
than the rates on a loaded machine; the rates are what the machine gave.

A figure, not a test. Run: ``python bench/proxy_frames.py`` (``--requests
5000`` for a quick look; ``--version 11`` for answers the proxy reads, as
modern clients' are).
"""

from __future__ import annotations

import argparse
import socket
import struct
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from proxy import brokers, cpu_seconds, proxy  # bench/proxy.py
from trafka.codec import ApiKey, protocol
from trafka.codec.messages import k00_produce as pm
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.records import encode_batch


def produce_frames(topic: str, batch: int, n: int, version: int = 9) -> list[bytes]:
    """``n`` Produce requests (acks=1) of ``version``, correlation ids 1..n."""
    records = encode_batch([(i, None, b"v" * 100, []) for i in range(batch)])
    body = pm.ProduceRequest(
        acks=1,
        timeout_ms=30_000,
        topic_data=[
            pm.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[pm.ProduceRequest.PartitionProduceData(index=0, records=records)],
            )
        ],
    )
    frames = []
    for corr in range(1, n + 1):
        header = RequestHeader(
            request_api_key=ApiKey.PRODUCE,
            request_api_version=version,
            correlation_id=corr,
            client_id="frames",
        )
        frames.append(protocol.encode_request(header, body))
    return frames


def run(address: str, frames: list[bytes], window: int, version: int = 9) -> float:
    """Send ``frames`` keeping ``window`` in flight; the seconds it took."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        data = b""
        answered = sent = 0
        started = time.perf_counter()
        while answered < len(frames):
            if sent - answered < window and sent < len(frames):
                chunk = frames[sent : sent + window - (sent - answered)]
                sock.sendall(b"".join(chunk))
                sent += len(chunk)
            data += sock.recv(1 << 20)
            while len(data) >= 4 and len(data) >= 4 + struct.unpack(">i", data[:4])[0]:
                size = 4 + struct.unpack(">i", data[:4])[0]
                _, body = protocol.decode_response(data[4:size], ApiKey.PRODUCE, version)
                codes = [p.error_code for t in body.responses for p in t.partition_responses]
                assert codes == [0], codes
                data = data[size:]
                answered += 1
        return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=10, help="records per request")
    parser.add_argument("--window", type=int, default=5, help="requests in flight")
    parser.add_argument(
        "--version",
        type=int,
        default=9,
        help="Produce version (10+: answers the proxy reads for leader hints, KIP-951)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trafka-bench-frames-") as tmp:
        root = Path(tmp)
        with brokers(1, root) as setup:
            topic = "frames"
            admin = AdminClient({"bootstrap.servers": setup.servers})
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
            frames = produce_frames(topic, args.batch, args.requests, args.version)
            run(setup.servers, frames[:100], args.window, args.version)  # the topic's leader ready
            with proxy(setup.servers, "none", root / "proxy.log") as px:
                # The proxy's first requests compile the codec's schemas: not measured.
                run(px.address, frames[:100], args.window, args.version)
                for name, address, pids in (
                    ("direct", setup.servers, []),
                    ("route none", px.address, [px.proc.pid]),
                ):
                    cpu0 = cpu_seconds(pids), cpu_seconds(setup.pids)
                    seconds = run(address, frames, args.window, args.version)
                    cpu1 = cpu_seconds(pids), cpu_seconds(setup.pids)
                    per = 10_000 / len(frames)
                    print(
                        f"{name:10}  {len(frames) / seconds:9,.0f} requests/s  "
                        f"proxy CPU {(cpu1[0] - cpu0[0]) * per:.2f} s, "
                        f"broker CPU {(cpu1[1] - cpu0[1]) * per:.2f} s per 10k requests "
                        f"({args.batch} records of 100 B each, {args.window} in flight, "
                        f"Produce v{args.version})"
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
