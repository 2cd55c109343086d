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
* ``mix``: each cycle one of the above or a ``kill -9`` of a leader and its restart;
* ``leader-zk-oneway``: ZooKeeper cannot send to a partition leader, which still
  sends to it (netlab's one-way cut), past the session timeout;
* ``client-leader``: the workload's host (``c1``) cut from one partition leader
  (not from the other brokers), past the clients' request timeout;
* ``proxy-leader``: the proxy's host (``px``) cut from one partition leader (only
  with a ``proxy`` workload);
* ``zk-member``, ``zk-leader``: with a ZooKeeper ensemble (three servers), one
  follower, or the quorum's leader, cut from every other host (the other
  servers, the brokers, the clients) past the session timeout;
* ``disk-stall``: a partition leader's disk stops answering (slowfs.py) past
  ``replica.lag.time.max.ms`` and the clients' request timeout, then answers again;
* ``clock-jump``: every broker's wall clock stepped 10 minutes forward, then back
  (clockshift.py).

The workloads (:func:`run_schedule`'s ``workload``), each on host ``c1``:
``acks`` (workload.py), ``acks1`` (the same and an ``acks=1`` producer), ``txn`` (txn_workload.py: transactional
read-process-write; ``txn-librdkafka`` and ``txn-java`` with those clients'
processors, txn_clients.py), ``proxy`` and ``proxy-journal`` (workload.py's
clients through ``trafka proxy``, without and with ``--journal``, on host
``px``), ``proxy-txn`` and ``proxy-journal-txn`` (the ``txn`` workload through the
proxy, without and with its journal).
:func:`run_schedule` runs one throughout and returns the checker's report.
"""

from __future__ import annotations

import dataclasses
import os
import random
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from checker import Report, check
from nscluster import PORT, NsCluster, wait_for, zk_mode
from txn_workload import TxnWorkload, check_transactions, committed_offsets
from workload import Workload, read_log, read_log_and_ends

Fault = Callable[[NsCluster, str, random.Random], tuple[str, bool]]
RECOVER_S = 180.0
JUMP_S = 600.0  # clock-jump's step
CLIENT = "c1"
PROXY = "px"
WORKLOADS = ("acks", "acks1", "txn", "txn-librdkafka", "txn-java", "proxy", "proxy-journal",
             "proxy-txn", "proxy-journal-txn")  # fmt: skip


@dataclasses.dataclass
class Clients:
    """The running workload, for faults that act on the clients' side."""

    workload: Workload
    host: str = CLIENT


RUNNING: list[Clients] = []  # the one running now (faults take no extra argument)


#: How long past its planned hold a fault stays on while the cluster has not yet
#: reacted: on a loaded machine (4 xdist workers beside other runs, load average
#: 25 on 2 cores) ZooKeeper's session expiry and the controller's reaction came
#: after a 9.4 s pause of a leader had ended, and the run was failed as a fault
#: without effect. The fault ends as soon as the reaction shows.
REACTION_GRACE_S = 60.0


def _hold(
    cluster: NsCluster,
    topic: str,
    seconds: float,
    before: dict[str, Any],
    grace: float = REACTION_GRACE_S,
) -> bool:
    """Keep a fault on for ``seconds`` (and, while the cluster has not reacted, up
    to ``grace`` longer), watching the metadata; whether the cluster reacted,
    compared with ``before`` (its state when whole): an ISR shrank, a leader or the
    controller moved. A fault whose effect is not the cluster's reaction (the
    cluster may stay whole under it) passes ``grace=0``: waiting for a reaction
    would only lengthen it."""
    deadline = time.monotonic() + seconds
    effect = False
    while time.monotonic() < deadline or (not effect and time.monotonic() < deadline + grace):
        try:
            now = cluster.state(topic)
        except Exception:  # no broker answered at this moment
            now = None
        if now is not None:
            for p, (leader, isr) in now["partitions"].items():
                effect |= len(isr) < len(cluster.nodes) or before["partitions"][p][0] != leader
            effect |= before["controller"] != now["controller"]
        left = deadline - time.monotonic()
        if left > 0 or not effect:
            time.sleep(min(0.5, left) if left > 0 else 0.5)
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
    cluster.lab.isolate([f"b{leader}"], cluster.zk_hosts)
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
    cluster.lab.isolate([f"b{active}"], [*cluster.zk_hosts, *others])
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


def leader_zk_oneway(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[str, bool]:
    leader, before = _leader(cluster, topic, rng)
    hold = _session_s(cluster) * 2 + rng.uniform(0, 3)
    cluster.lab.cut_one_way(cluster.zk_hosts, [f"b{leader}"])
    effect = _hold(cluster, topic, hold, before)
    cluster.lab.heal()
    return f"zk cannot send to leader b{leader} {hold:.1f} s", effect


def _client_timeout_s(cluster: NsCluster) -> float:
    return cluster.client_timeout_ms / 1000


def _cut_host_from_leader(
    cluster: NsCluster, topic: str, rng: random.Random, host: str
) -> tuple[str, bool]:
    """Cut ``host`` from one partition leader for 1.2 to 1.5 times the clients'
    request timeout (12-15 s with the 10 s of ``make faults``). The effect: no
    acknowledgement for that leader's partitions in the hold's second half, while
    another partition's kept coming (one broker cut, not all); the cluster itself
    is whole throughout."""
    leader, before = _leader(cluster, topic, rng)
    led = {p for p, (lead, _) in before["partitions"].items() if lead == leader}
    hold = _client_timeout_s(cluster) * rng.uniform(1.2, 1.5)
    told = RUNNING[-1].workload.told
    cluster.lab.isolate([host], [f"b{leader}"])
    started = time.monotonic()
    _hold(cluster, topic, hold, before, grace=0)
    healed = time.monotonic()
    cluster.lab.heal()
    late = [p for t, p in list(told.ack_times) if started + hold / 2 <= t <= healed]
    effect = not led & set(late) and bool(set(late) - led)
    return f"{host} cut from leader b{leader} {hold:.1f} s", effect


def client_leader(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[str, bool]:
    return _cut_host_from_leader(cluster, topic, rng, CLIENT)


def proxy_leader(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[str, bool]:
    return _cut_host_from_leader(cluster, topic, rng, PROXY)


def _cut_zk_member(cluster: NsCluster, topic: str, host: str, hold: float) -> bool:
    """Cut ZooKeeper server ``host`` from every other host (the other servers, the
    brokers, the clients) for ``hold`` seconds; whether it acted: the cut server
    stopped serving (it lost its quorum; asked from the client host, which no cut
    reaches) while the other two kept a leader."""
    if len(cluster.zk_hosts) < 3:
        raise ValueError("a ZooKeeper schedule needs an ensemble (run.py makes one)")
    cluster.wait_healthy(topic, RECOVER_S)
    cluster.lab.isolate([host], [h for h in cluster.lab.hosts if h != host])
    deadline = time.monotonic() + hold
    stopped = led = False
    while time.monotonic() < deadline:
        modes = {h: zk_mode(a) for h, a in cluster.zk_addresses.items()}
        stopped |= modes[host] is None
        led |= "leader" in [m for h, m in modes.items() if h != host]
        time.sleep(0.5)
    cluster.lab.heal()
    return stopped and led


def zk_member(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[str, bool]:
    followers = sorted(set(cluster.zk_hosts) - {cluster.zk_leader()})
    host = rng.choice(followers)
    hold = _session_s(cluster) * 1.5 + rng.uniform(0, 2)
    effect = _cut_zk_member(cluster, topic, host, hold)
    return f"ZooKeeper follower {host} cut from every host {hold:.1f} s", effect


def zk_leader(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[str, bool]:
    host = cluster.zk_leader()
    hold = _session_s(cluster) * 1.5 + rng.uniform(0, 2)
    effect = _cut_zk_member(cluster, topic, host, hold)
    return f"ZooKeeper leader {host} cut from every host {hold:.1f} s", effect


def disk_stall(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[str, bool]:
    """A partition leader's disk stops answering (slowfs's ``stall``: every read, write
    and fsync waits) past ``replica.lag.time.max.ms`` and the clients' request
    timeout, then answers again. The effect: no acknowledgement for that leader's
    partitions in the hold's second half (with ``acks=all`` the others stall too,
    until their leaders drop the stalled follower from their ISR: on Kafka as on
    brokerlite, not always within the hold)."""
    if not cluster.disks:
        raise ValueError("a disk schedule needs a cluster with disks (run.py makes one)")
    leader, before = _leader(cluster, topic, rng)
    led = {p for p, (lead, _) in before["partitions"].items() if lead == leader}
    lag_s = int(cluster.settings["replica.lag.time.max.ms"]) / 1000
    hold = max(lag_s * 2, _client_timeout_s(cluster) * 1.2) + rng.uniform(0, 3)
    told = RUNNING[-1].workload.told
    cluster.disks[leader].set("stall")
    started = time.monotonic()
    _hold(cluster, topic, hold, before, grace=0)
    healed = time.monotonic()
    cluster.disks[leader].set("0")
    late = {p for t, p in list(told.ack_times) if started + hold / 2 <= t <= healed}
    effect = not led & late
    return f"leader b{leader}'s disk stalled {hold:.1f} s", effect


def clock_jump(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[str, bool]:
    """Every broker's wall clock stepped 10 minutes forward for 12-15 s, then back
    (clockshift.py; the monotonic clocks untouched), as a wrong NTP step of their
    machines and its correction do. The effect: the cluster reacted (an ISR shrank,
    a leader moved) or the workload saw an error it did not cause."""
    if not cluster.clocks:
        raise ValueError("a clock schedule needs a cluster with clocks (run.py makes one)")
    before = cluster.wait_healthy(topic, RECOVER_S)
    hold = rng.uniform(12, 15)
    for clock in cluster.clocks.values():
        clock.set(JUMP_S)
    effect = _hold(cluster, topic, hold, before)
    for clock in cluster.clocks.values():
        clock.set(0.0)
    return f"every broker's clock {JUMP_S:+.0f} s for {hold:.1f} s, then back", effect


def mix(cluster: NsCluster, topic: str, rng: random.Random) -> tuple[str, bool]:
    return rng.choice([leader_zk, pause, leader_followers, controller, kill9])(cluster, topic, rng)


SCHEDULES: dict[str, Fault] = {
    "leader-zk": leader_zk,
    "pause": pause,
    "leader-followers": leader_followers,
    "controller": controller,
    "mix": mix,
    "leader-zk-oneway": leader_zk_oneway,
    "client-leader": client_leader,
    "proxy-leader": proxy_leader,
    "zk-member": zk_member,
    "zk-leader": zk_leader,
    "disk-stall": disk_stall,
    "clock-jump": clock_jump,
}


def fits(schedule: str, workload: str) -> bool:
    """Whether ``schedule`` means something under ``workload``: the proxy cut needs a
    proxy; a client cut from a leader needs clients that talk to leaders."""
    through_proxy = workload.startswith("proxy")
    return {"proxy-leader": through_proxy, "client-leader": not through_proxy}.get(schedule, True)


def ensure_host(cluster: NsCluster, host: str) -> str:
    if host not in cluster.lab.hosts:
        cluster.lab.add_host(host)
    return cluster.lab.hosts[host]


def start_proxy(cluster: NsCluster, journal: bool) -> tuple[str, Any]:
    """``trafka proxy`` on host ``px`` (with a directory journal or none) in front of
    the cluster; its bootstrap address, and the process."""
    address = ensure_host(cluster, PROXY)
    argv = [sys.executable, "-m", "trafka.tools.cli", "proxy", "--upstream",
            cluster.bootstrap_servers, "--listen", f"{address}:{PORT}"]  # fmt: skip
    if journal:
        argv += ["--journal", str(cluster.root / "proxy-journal")]
    with open(Path(cluster.root) / "proxy.log", "ab") as log:
        proc = cluster.lab.spawn(PROXY, argv, log)
    bootstrap = f"{address}:{PORT}"
    wait_for("the proxy to serve", lambda: _answers(cluster, bootstrap), 60)
    return bootstrap, proc


def _cpu_s(pid: int) -> float:
    """A live process's user and system CPU seconds (proc(5), /proc/PID/stat); 0 once gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Phases:
    """Wall and CPU seconds of each phase of a run, for the report: the CPU of this
    process (the workload's clients, the checks) and of the cluster's (brokers,
    ZooKeeper, slowfs, proxy; what a process killed in a phase spent in it is not
    counted)."""

    def __init__(self, cluster: NsCluster) -> None:
        self.cluster = cluster
        self.done: list[tuple[str, float, float, float]] = []
        self._last = self._now()

    def _now(self) -> tuple[float, float, dict[int, float]]:
        own = resource.getrusage(resource.RUSAGE_SELF)
        pids = [p.pid for p in self.cluster.lab.procs if p.poll() is None]
        pids += [d.proc.pid for d in self.cluster.disks.values()]
        return time.monotonic(), own.ru_utime + own.ru_stime, {p: _cpu_s(p) for p in pids}

    def mark(self, phase: str) -> None:
        """``phase`` ended now."""
        now = self._now()
        theirs = sum(cpu - self._last[2].get(pid, 0.0) for pid, cpu in now[2].items() if cpu)
        self.done.append((phase, now[0] - self._last[0], now[1] - self._last[1], theirs))
        self._last = now

    def line(self) -> str:
        return "phases (wall s, CPU s here + cluster): " + "; ".join(
            f"{name} {wall:.1f}, {own:.1f}+{theirs:.1f}" for name, wall, own, theirs in self.done
        )


def _answers(cluster: NsCluster, bootstrap: str) -> dict[str, Any] | None:
    try:
        return cluster.state(bootstrap=bootstrap)
    except Exception:  # not serving yet
        return None


def run_schedule(
    cluster: NsCluster,
    name: str,
    seed: int,
    cycles: int = 1,
    partitions: int = 3,
    say: Callable[[str], None] = print,
    workload: str = "acks",
) -> tuple[Report, dict[str, Any]]:
    """Run schedule ``name`` for ``cycles`` faults under ``workload``; the checker's
    report, and what the run saw (the log, what the clients were told)."""
    say(f"schedule {name} ({workload}): seed {seed} "
        f"(replay: --schedules {name} --workloads {workload} --seed {seed})")  # fmt: skip
    rng = random.Random(seed)
    phases = Phases(cluster)
    topic = f"faults-{name}-{workload}-{seed}"
    cluster.create_topic(topic, partitions)
    ensure_host(cluster, CLIENT)
    bootstrap, proxy = cluster.bootstrap_servers, None
    if workload.startswith("proxy"):
        bootstrap, proxy = start_proxy(cluster, journal=workload.startswith("proxy-journal"))
    transactional = "txn" in workload
    if transactional:
        cluster.create_topic(f"{topic}-out", partitions)
        client = workload.removeprefix("txn-") if workload.startswith("txn-") else "trafka"
        java = (cluster.root, lambda argv, log: cluster.lab.spawn(CLIENT, argv, log))
        running: Workload = TxnWorkload(bootstrap, topic, f"{topic}-out", partitions,
                                        f"g-{topic}", seed, cluster.lab.namespace(CLIENT),
                                        client=client, java=java,
                                        request_timeout_ms=cluster.client_timeout_ms,
                                        interval=cluster.client_pace_s)  # fmt: skip
    else:
        running = Workload(bootstrap, topic, partitions, group=f"g-{topic}",
                           netns=cluster.lab.namespace(CLIENT), acks1=workload == "acks1",
                           request_timeout_ms=cluster.client_timeout_ms,
                           interval=cluster.client_pace_s)  # fmt: skip
    RUNNING.append(Clients(running))
    phases.mark("setup")
    running.start()
    try:
        report, seen = _run_faults(cluster, name, seed, cycles, rng, topic, partitions, running,
                                   say, phases)  # fmt: skip
    finally:
        RUNNING.pop()
        if proxy is not None:
            proxy.kill()
            proxy.wait()
    if transactional:
        assert isinstance(running, TxnWorkload)
        sink, ends = read_log_and_ends(cluster.bootstrap_servers, f"{topic}-out", partitions)
        visible = read_log(cluster.bootstrap_servers, f"{topic}-out", partitions,
                           isolation="read_committed")  # fmt: skip
        offsets = committed_offsets(cluster.bootstrap_servers, topic, partitions,
                                    running.txn_group)  # fmt: skip
        seen |= {"sink": sink, "visible": visible, "offsets": offsets, "ends": ends}
        check_transactions(report, running.told, seen["log"], sink, visible, offsets)
        phases.mark("txn read-back")
    say(report.table())
    say(phases.line())
    return report, seen


def _run_faults(
    cluster: NsCluster,
    name: str,
    seed: int,
    cycles: int,
    rng: random.Random,
    topic: str,
    partitions: int,
    workload: Workload,
    say: Callable[[str], None],
    phases: Phases,
) -> tuple[Report, dict[str, Any]]:
    wait_for("the first acknowledgements", lambda: workload.progress() > 50 or None, 120)
    phases.mark("warm-up")
    faults: list[tuple[str, float]] = []
    effects: list[bool] = []
    for _ in range(cycles):
        started = time.monotonic()
        label, effect = SCHEDULES[name](cluster, topic, rng)
        faults.append((label, started))
        effects.append(effect)
        say(f"  {label}" + ("" if effect else " (no effect seen)"))
        phases.mark("fault")
        cluster.wait_healthy(topic, RECOVER_S)
        phases.mark("recovery")
    before = workload.progress()
    try:
        wait_for("writes after healing", lambda: workload.progress() > before + 50 or None, 120)
        stalled = None
    except AssertionError as exc:  # checked and reported like the rest
        stalled = f"{exc} (progress {before} -> {workload.progress()})"
    phases.mark("writes after")
    told = workload.stop()
    end = time.monotonic()
    phases.mark("stop")
    log = read_log(cluster.bootstrap_servers, topic, partitions)
    phases.mark("read-back")
    report = check(told, log, faults, end, name, seed)
    phases.mark("check")
    if stalled is not None:
        report.promises += ("stalled",)
        report.note("stalled", stalled)
    seen = {"told": told, "log": log, "topic": topic, "effects": effects,
            "unavailable_s": report.unavailable_s}  # fmt: skip
    return report, seen


def assert_kept(
    report: Report, seen: dict[str, Any], seed: int, unpromised: frozenset[str] = frozenset()
) -> None:
    """The tests' assertions on one run: the fault acted, no promise broke (but those
    named ``unpromised``), and the checker is not blind (a record taken out of the log
    read back is found lost; for a transactional run, one committed output hidden is
    found as a partial or invisible transaction, one shown twice as an input processed
    twice)."""
    assert seen["effects"] == [True], f"the fault had no effect (seed {seed})"
    assert report.acked > 0
    broken = {k: v for k, v in report.broken.items() if k not in unpromised}
    assert broken == {}, f"seed {seed}:\n{report.table()}"
    partition, offset = next(s for v, s in seen["told"].acked.items() if not v.startswith(b"a1"))
    tampered = {p: list(values) for p, values in seen["log"].items()}
    tampered[partition][offset] = b""
    assert check(seen["told"], tampered, [], 0.0).counts.get("lost") == 1
    acks1 = [(v, spot) for v, spot in seen["told"].acked.items() if v.startswith(b"a1")]
    if seen["told"].sent_acks1:  # one acks=1 record taken out: reported, not a broken promise
        assert acks1, "the acks=1 producer got no acknowledgement"
        partition, offset = next(s for v, s in acks1 if s[1] >= 0
                                 and seen["log"][s[0]][s[1]] == v)  # fmt: skip
        tampered = {p: list(values) for p, values in seen["log"].items()}
        tampered[partition][offset] = b""
        found = check(seen["told"], tampered, [], 0.0)
        assert found.counts.get("lost_acks1", 0) == report.counts.get("lost_acks1", 0) + 1
        assert found.counts.get("lost", 0) == report.counts.get("lost", 0)
    if "visible" not in seen:
        return
    told = seen["told"]
    txn = next(t for t in told.txns if t.outcome == "committed")
    for change, finding in (("hide", {"partial_txn", "committed_invisible"}),
                            ("double", {"processed_twice"})):  # fmt: skip
        visible = {p: list(values) for p, values in seen["visible"].items()}
        where = next((p, o) for p, vs in visible.items() for o, v in enumerate(vs)
                     if v == txn.outputs[0])  # fmt: skip
        if change == "hide":
            visible[where[0]][where[1]] = b""
        else:
            visible[where[0]].append(txn.outputs[0])
        found = check_transactions(
            Report("tampered", seed), told, seen["log"], seen["sink"], visible, seen["offsets"]
        ).counts
        assert finding & set(found), (change, found)
