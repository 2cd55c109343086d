"""How `trafka proxy --workers N` scales on a machine with more cores: a model
built on the figures measured on this 2-core machine (issue #66).

What the model takes as given (docs/proxy.md, "More than one core" and
"Sizing"):

* a worker is one process and at most one core; workers share nothing but the
  listening port (no lock, no shared memory), so N workers have N cores' worth
  of capacity, each worth the CPU per record one proxy process measures
  (``--cpu-per-100k``: proxy CPU seconds per 100,000 records routed);
* the kernel hands each new connection on the shared port to a worker by a
  hash of its addresses and ports (``SO_REUSEPORT``): a client's bootstrap
  connection lands on a worker uniformly at random, and every later
  connection of that client (to the broker ports that worker's Metadata
  answer names) stays on that worker;
* each client offers ``--offer`` records/s, so a worker carries the sum of its
  clients' offers, capped by its one core.

Printed, per number of workers and of clients: the records/s the proxy carries
(the mean over ``--trials`` random spreads of clients over workers), as a
fraction of what N cores would carry with the clients spread evenly, and the
busiest worker's share. What the model leaves out is printed after the table.

A model, not a measurement: ``python bench/proxy_workers_model.py``
(``--smoke``: a check that it runs).
"""

from __future__ import annotations

import argparse
import random
import statistics


def carried(workers: int, clients: int, offer: float, capacity: float, rng: random.Random) -> float:
    """Records/s the workers carry for one random spread of the clients."""
    return sum(min(capacity, offer * n) for n in _spread(workers, clients, rng))


def even(workers: int, clients: int, offer: float, capacity: float) -> float:
    """Records/s with the clients spread as evenly as they can be."""
    per, extra = divmod(clients, workers)
    return sum(min(capacity, offer * (per + (1 if w < extra else 0))) for w in range(workers))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-per-100k", type=float, default=0.15)
    parser.add_argument("--offer", type=float, default=100_000, help="records/s per client")
    parser.add_argument("--workers", default="1,2,4,8,16")
    parser.add_argument("--clients", default="4,16,64,256")
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    trials = 20 if args.smoke else args.trials
    capacity = 100_000 / args.cpu_per_100k  # records/s of one core
    rng = random.Random(1)
    print(
        f"one worker = one core = {capacity:,.0f} records/s routed "
        f"({args.cpu_per_100k} CPU s per 100,000 records); each client offers "
        f"{args.offer:,.0f} records/s"
    )
    print(f"{'workers':>8} {'clients':>8} {'records/s':>12} {'of even':>8} {'busiest':>8}")
    for n in (int(w) for w in args.workers.split(",")):
        for c in (int(x) for x in args.clients.split(",")):
            runs = [carried(n, c, args.offer, capacity, rng) for _ in range(trials)]
            best = even(n, c, args.offer, capacity)
            busiest = statistics.mean(
                max(loads) / max(sum(loads), 1)
                for loads in (_spread(n, c, rng) for _ in range(trials))
            )
            print(
                f"{n:>8} {c:>8} {statistics.mean(runs):>12,.0f} "
                f"{statistics.mean(runs) / best:>8.2f} {busiest:>8.2f}"
            )
    print(
        "left out: the brokers behind (N workers open N connections to each broker "
        "and ask it N times for metadata); the journal (a directory per worker, or one "
        "instance of the topic journal per worker); memory (per worker: about 44 MB and "
        "queued_max_request_bytes); the supervisor (idle but for /metrics, which asks "
        "every worker); what the cores share (caches, memory bandwidth, the NIC's queues)"
    )


def _spread(workers: int, clients: int, rng: random.Random) -> list[int]:
    counts = [0] * workers
    for _ in range(clients):
        counts[rng.randrange(workers)] += 1
    return counts


if __name__ == "__main__":
    main()
