"""The long fault run: ``make faults`` or ``python tests/faults/run.py [--schedules a,b]
[--workloads w,...] [--seed N] [--cycles N] [--broker brokerlite|kafka|both]
[--keep DIR]``, as root (network namespaces); the workloads are schedules.WORKLOADS.
Each schedule runs under each workload named (``proxy-leader`` only under the
proxy ones). One cluster (ZooKeeper and three brokers, each in a namespace of its
own: brokerlite, or Apache Kafka 3.9 as the control) runs every schedule named,
one after the other; the checker's table is printed for each. With a ``zk-``
schedule named, ZooKeeper is an ensemble of three (for every schedule of the
run); with a ``disk-`` one, each broker's log dir is on a slowfs (slowfs.py) for
every schedule of the run; with a ``clock-`` one, each broker's wall clock can be
stepped (clockshift.py). ``--keep DIR`` keeps the logs there. Exits 1 when a promise was broken
(see checker.PROMISES), 0 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # kafka_peers, for --broker kafka

import netlab
from nscluster import KafkaNsCluster, NsCluster
from schedules import SCHEDULES, WORKLOADS, fits, run_schedule


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--schedules", default=",".join(SCHEDULES))
    parser.add_argument("--workloads", default="acks", help=", ".join(WORKLOADS))
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument(
        "--broker", default="brokerlite", help="brokerlite, kafka (3.9, the control) or both"
    )
    parser.add_argument("--keep", default=None, help="a directory to keep the logs in")
    args = parser.parse_args()
    why = netlab.available()
    if why is not None:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    names = args.schedules.split(",")
    for name in names:
        if name not in SCHEDULES:
            parser.error(f"no schedule {name!r}: {', '.join(SCHEDULES)}")
    workloads = args.workloads.split(",")
    for workload in workloads:
        if workload not in WORKLOADS:
            parser.error(f"no workload {workload!r}: {', '.join(WORKLOADS)}")
    brokers = ["brokerlite", "kafka"] if args.broker == "both" else [args.broker]
    broken = False
    for broker in brokers:
        kind = KafkaNsCluster if broker == "kafka" else NsCluster
        where: Any = (
            contextlib.nullcontext(f"{args.keep}/{broker}")
            if args.keep
            else tempfile.TemporaryDirectory(prefix="trafka-faults-")
        )
        with netlab.NetLab() as lab, where as root:
            # the ZooKeeper schedules need an ensemble; the others run on it too
            zookeepers = 3 if any(n.startswith("zk-") for n in names) else 1
            disks = any(n.startswith("disk-") for n in names)  # log dirs on slowfs
            clocks = any(n.startswith("clock-") for n in names)  # clockshift.py
            cluster = kind(lab, Path(root), zookeepers=zookeepers, disks=disks, clocks=clocks)
            try:
                cluster.start()
                for name in names:
                    for workload in workloads:
                        if not fits(name, workload):
                            continue
                        print(f"== {broker}")
                        report, _ = run_schedule(
                            cluster, name, seed, cycles=args.cycles, workload=workload
                        )
                        broken |= bool(report.broken)
            finally:
                cluster.stop()
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
