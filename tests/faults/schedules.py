"""Fault schedules: each cycle picks its target from the cluster's metadata and a seeded
random generator, applies one fault for a seeded time past the timeout it is
about, heals it, and waits until every partition has a leader and a whole ISR
again (so cycles, and schedules on one cluster, start from a clean state).

* ``leader-zk``: a partition leader cut from ZooKeeper (not from clients, not
  from the other brokers) past ``zookeeper.session.timeout.ms``;
* ``pause``: a partition leader stopped (SIGSTOP) past the session timeout, then
  continued;
* ``leader-followers``: a partition leader cut from the other brokers (not from
  ZooKeeper or clients) past ``replica.lag.time.max.ms``;
* ``controller``: the controller cut from ZooKeeper and the other brokers;
* ``mix``: each cycle one of the above or a ``kill -9`` of a leader and its restart.

:func:`run_schedule` runs the workload throughout and returns the checker's report.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from checker import Report, check
from nscluster import NsCluster, wait_for
from workload import Workload, read_log

Fault = Callable[[NsCluster, str, random.Random], tuple[str, bool]]
RECOVER_S = 180.0


def _hold(cluster: NsCluster, topic: str, seconds: float, before: dict[str, Any]) -> bool:
    """Keep a fault on for ``seconds``, watching the metadata; whether the cluster
    reacted, compared with ``before`` (its state when whole): an ISR shrank, a leader
    or the controller moved."""
    deadline = time.monotonic() + seconds
    effect = False
    while time.monotonic() < deadline:
        try:
            now = cluster.state(topic)
        except Exception:  # no broker answered at this moment
            now = None
        if now is not None:
            for p, (leader, isr) in now["partitions"].items():
                effect |= len(isr) < len(cluster.nodes) or before["partitions"][p][0] != leader
            effect |= before["controller"] != now["controller"]
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    return effect


def _session_s(cluster: NsCluster) -> float:
    return int(cluster.settings["zookeeper.session.timeout.ms"]) / 1000


def _leader(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[int, dict[str, Any]]:
    """A partition leader picked at random, and the cluster's state (whole)."""
    state = cluster.wait_healthy(topic, RECOVER_S)
    partitions = state["partitions"]
    return int(partitions[rng.choice(sorted(partitions))][0]), state


def leader_zk(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[str, bool]:
    leader, before = _leader(cluster, topic, rng)
    hold = _session_s(cluster) * 2 + rng.uniform(0, 3)
    cluster.lab.isolate([f"b{leader}"], ["zk"])
    effect = _hold(cluster, topic, hold, before)
    cluster.lab.heal()
    return f"leader b{leader} cut from zk {hold:.1f} s", effect


def pause(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[str, bool]:
    leader, before = _leader(cluster, topic, rng)
    hold = _session_s(cluster) * 1.5 + rng.uniform(0, 3)
    cluster.pause(leader)
    effect = _hold(cluster, topic, hold, before)
    cluster.resume(leader)
    return f"leader b{leader} paused {hold:.1f} s", effect


def leader_followers(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[str, bool]:
    leader, before = _leader(cluster, topic, rng)
    lag_s = int(cluster.settings["replica.lag.time.max.ms"]) / 1000
    hold = lag_s * 2 + rng.uniform(0, 3)
    cluster.lab.isolate([f"b{leader}"], [f"b{n}" for n in cluster.nodes if n != leader])
    effect = _hold(cluster, topic, hold, before)
    cluster.lab.heal()
    return f"leader b{leader} cut from followers {hold:.1f} s", effect


def controller(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[str, bool]:
    before = cluster.wait_healthy(topic, RECOVER_S)
    active = int(before["controller"])
    hold = _session_s(cluster) * 2 + rng.uniform(0, 3)
    others = [f"b{n}" for n in cluster.nodes if n != active]
    cluster.lab.isolate([f"b{active}"], ["zk", *others])
    effect = _hold(cluster, topic, hold, before)
    cluster.lab.heal()
    return f"controller b{active} cut from zk and brokers {hold:.1f} s", effect


def kill9(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[str, bool]:
    leader, _ = _leader(cluster, topic, rng)
    cluster.kill(leader)
    # Kafka's rule too: the broker registers again once ZooKeeper dropped its session.
    time.sleep(_session_s(cluster) + rng.uniform(0, 2))
    cluster.start_node(leader)
    return f"leader b{leader} killed -9, restarted", True


def mix(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[str, bool]:
    return rng.choice([leader_zk, pause, leader_followers, controller, kill9])(cluster, topic, rng)


SCHEDULES: dict[str, Fault] = {
    "leader-zk": leader_zk,
    "pause": pause,
    "leader-followers": leader_followers,
    "controller": controller,
    "mix": mix,
}


def run_schedule(
    cluster: NsCluster,
    name: str,
    seed: int,
    cycles: int = 1,
    partitions: int = 3,
    say: Callable[[str], None] = print,
) -> tuple[Report, dict[str, Any]]:
    """Run schedule ``name`` for ``cycles`` faults under the workload; the checker's
    report, and what the run saw (the log, what the clients were told)."""
    say(f"schedule {name}: seed {seed} (replay: --schedules {name} --seed {seed})")
    rng = random.Random(seed)
    topic = f"faults-{name}-{seed}"
    cluster.create_topic(topic, partitions)
    workload = Workload(cluster.bootstrap_servers, topic, partitions, group=f"g-{topic}")
    workload.start()
    wait_for("the first acknowledgements", lambda: len(workload.told.acked) > 50 or None, 120)
    faults: list[tuple[str, float]] = []
    effects: list[bool] = []
    for _ in range(cycles):
        started = time.monotonic()
        label, effect = SCHEDULES[name](cluster, topic, rng)
        faults.append((label, started))
        effects.append(effect)
        say(f"  {label}" + ("" if effect else " (no effect seen in the metadata)"))
        cluster.wait_healthy(topic, RECOVER_S)
    before = len(workload.told.acked)
    wait_for("writes after healing", lambda: len(workload.told.acked) > before + 50 or None, 120)
    told = workload.stop()
    end = time.monotonic()
    log = read_log(cluster.bootstrap_servers, topic, partitions)
    report = check(told, log, faults, end, name, seed)
    say(report.table())
    return report, {"told": told, "log": log, "topic": topic, "effects": effects}
