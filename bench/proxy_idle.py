"""Memory of idle connections to ``trafka proxy`` (issue #46: <= 50 KiB each).

One single-node brokerlite process and one routing proxy process (``trafka
broker``, ``trafka proxy``, as in production). The proxy's resident memory
(``VmRSS``) is read before and after ``--idle`` connections (default 2,000)
are opened and have settled, in two rounds, each on a proxy of its own (memory a process frees stays in its
allocator, so a second round on the same proxy would reuse the first's):

* **silent**: connected, nothing sent (a client that has not spoken yet, or
  a port scanner);
* **after ApiVersions**: each has done one ApiVersions round trip, then sits
  silent, as a client between requests does.

The figure printed is the growth of the
proxy's RSS divided by the connections: KiB per idle connection. The connections
are spread over the proxy's listeners (bootstrap and the broker's). A figure,
not a test; the machine's other load moves it little (it is memory, not time).

Run: ``python bench/proxy_idle.py`` (``--idle 500`` for a quick look).
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

from proxy import brokers, open_idle, proxy, rss_mb  # bench/proxy.py


def settle(pid: int, seconds: float) -> float:
    """The process's RSS (MiB) once it stopped moving for a moment (the proxy
    accepts the last connections asynchronously)."""
    deadline = time.monotonic() + seconds
    last = rss_mb(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_mb(pid)
        if abs(now - last) < 0.05:
            return now
        last = now
    return last


def open_silent(addresses: list[tuple[str, int]], count: int) -> list[socket.socket]:
    socks: list[socket.socket] = []
    try:
        for i in range(count):
            socks.append(socket.create_connection(addresses[i % len(addresses)], timeout=30))
            if i % 100 == 99:
                time.sleep(0.01)  # under the listeners' accept backlog (128)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=2_000)
    parser.add_argument("--route-keys", default="murmur2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trafka-bench-idle-") as tmp:
        root = Path(tmp)
        with brokers(1, root) as setup:
            print(f"proxy --route-keys {args.route_keys}, {args.idle:,} idle connections")
            for what, opener in (("silent", open_silent), ("after ApiVersions", open_idle)):
                # A proxy of its own per round: freed memory stays in the allocator.
                log = root / f"proxy-{what.split()[0]}.log"
                with proxy(setup.servers, args.route_keys, log) as running:
                    pid = running.proc.pid
                    admin = AdminClient({"bootstrap.servers": running.address, "log_level": 3})
                    meta = admin.list_topics(timeout=10)
                    listeners = [(b.host, b.port) for b in meta.brokers.values()]
                    del admin
                    host, port = running.address.rsplit(":", 1)
                    listeners.append((host, int(port)))
                    before = settle(pid, 10)
                    socks = opener(listeners, args.idle)
                    try:
                        after = settle(pid, 30)
                    finally:
                        for sock in socks:
                            sock.close()
                grown_kib = (after - before) * 1024
                print(
                    f"  {what:<18} RSS {before:6.1f} -> {after:6.1f} MiB: "
                    f"{grown_kib / args.idle:6.1f} KiB per idle connection "
                    f"(over {len(listeners)} listeners)",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
