"""What the answer side's hand-off between two tasks costs (issue #66).

``trafka proxy`` reads a client's upstream connection in one task
(``_upstream_frames``: ``receive_some``, a ``FrameReader``, the whole frames of
a read sent over a memory channel) and writes the client's answers in another
(``_answers``: the channel's frames matched with the answers owed, written with
``send_all``). This measures that path alone, on loopback socket pairs, against
the same work done by one task (read, frames, write in the same wake-up):

* a second thread, on blocking sockets, plays the broker and the client: it
  writes one answer frame (``--size`` bytes) into the "upstream" socket and
  times until the same bytes come out of the "client" socket, ``--answers``
  times, one at a time (each answer alone, as at a fixed rate below
  saturation);
* the trio side forwards them, in two tasks over a channel or in one.

Printed per variant and round (``--rounds``, the variants alternated): the
time per answer, p50 and p99 in µs, and the trio thread's CPU per answer
(``time.thread_time``). A figure, not a test: the two variants differ only in
the hop, so their difference is the hop's cost on this machine at its load.

Run: ``python bench/proxy_hop.py`` (``--answers 20000 --rounds 5``).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import threading
import time
from collections.abc import Awaitable, Callable

import trio

from trafka.codec.framing import FrameReader

_RECV = 65536


async def _two_tasks(upstream: trio.SocketStream, client: trio.SocketStream) -> None:
    send, receive = trio.open_memory_channel[list[bytes]](100)

    async def read() -> None:
        reader = FrameReader(1 << 20, join_from=_RECV)
        async with send:
            while data := await upstream.receive_some(_RECV):
                reader.feed(data)
                if whole := list(reader):
                    await send.send(whole)

    async def write() -> None:
        async for frames in receive:
            parts = [p for f in frames for p in (struct.pack(">i", len(f)), f)]
            await client.send_all(b"".join(parts))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        nursery.start_soon(write)


async def _one_task(upstream: trio.SocketStream, client: trio.SocketStream) -> None:
    reader = FrameReader(1 << 20, join_from=_RECV)
    while data := await upstream.receive_some(_RECV):
        reader.feed(data)
        if whole := list(reader):
            parts = [p for f in whole for p in (struct.pack(">i", len(f)), f)]
            await client.send_all(b"".join(parts))


def _ping(up: socket.socket, cl: socket.socket, frame: bytes, n: int, out: list[float]) -> None:
    for _ in range(n):
        started = time.perf_counter()
        up.sendall(frame)
        got = 0
        while got < len(frame):
            got += len(cl.recv(_RECV))
        out.append(time.perf_counter() - started)
    up.shutdown(socket.SHUT_WR)


def measure(
    forward: Callable[[trio.SocketStream, trio.SocketStream], Awaitable[None]], size: int, n: int
) -> tuple[list[float], float]:
    """Per-answer times (seconds) and the trio thread's CPU seconds per answer."""
    up_far, up_near = socket.socketpair()
    cl_near, cl_far = socket.socketpair()
    frame = struct.pack(">i", size - 4) + struct.pack(">i", 7) + b"x" * (size - 8)
    times: list[float] = []
    cpu: list[float] = []

    async def main() -> None:
        upstream = trio.SocketStream(trio.socket.from_stdlib_socket(up_near))
        client = trio.SocketStream(trio.socket.from_stdlib_socket(cl_near))
        pinger = threading.Thread(target=_ping, args=(up_far, cl_far, frame, n, times))
        started = time.thread_time()
        pinger.start()
        await forward(upstream, client)
        cpu.append(time.thread_time() - started)
        await trio.to_thread.run_sync(pinger.join)

    trio.run(main)
    for s in (up_far, cl_far):
        s.close()
    return times, cpu[0] / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100, help="bytes per answer frame")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    variants = {"two tasks": _two_tasks, "one task": _one_task}
    results: dict[str, list[tuple[float, float, float]]] = {v: [] for v in variants}
    for r in range(args.rounds):
        for name, forward in variants.items():
            times, cpu = measure(forward, args.size, args.answers)
            cuts = statistics.quantiles(times, n=100)
            results[name].append((cuts[49] * 1e6, cuts[98] * 1e6, cpu * 1e6))
            print(
                f"round {r + 1} {name:9}  p50 {cuts[49] * 1e6:6.1f} µs  "
                f"p99 {cuts[98] * 1e6:7.1f} µs  trio CPU {cpu * 1e6:5.1f} µs per answer"
            )
    for name, rows in results.items():
        p50, p99, cpu = (statistics.median(col) for col in zip(*rows, strict=True))
        print(
            f"median {name:9}  p50 {p50:6.1f} µs  p99 {p99:7.1f} µs  trio CPU {cpu:5.1f} µs"
            f" ({args.answers} answers of {args.size} B, {args.rounds} rounds)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
