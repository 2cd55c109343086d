"""A three-node brokerlite cluster and a three-node Kafka 3.9 cluster, both on
ZooKeeper, driven the same way: the znodes each writes, and what clients see, compared.

Kafka's side is the reference. Its ZooKeeper layout is ``kafka.zk.ZkData``'s
(Kafka 3.9's operations docs, "ZooKeeper"); the scenarios follow its documented
rules: replica placement and creation (``kafka-topics``), reassignment through
AlterPartitionReassignments (KIP-455: the target replicas first, then those
leaving, ``adding_replicas``/``removing_replicas`` in ``/brokers/topics/T``),
preferred leader election (KIP-460), the controller taking a stopped broker out
of every ISR and the leader adding it back (KIP-497: AlterPartition, so no
``/isr_change_notification`` is written), and unclean leader election with the
topic's ``unclean.leader.election.enable`` (KIP-704 marks such a leader
RECOVERING). A validate-only CreateTopics is answered with the topic it would
have made (KIP-525).

Broker ids differ between the clusters (placement starts at a random broker,
either may be the controller), so each cluster's brokers get roles: ``C`` its
controller, ``A`` and ``B`` the others in id order; topics are created with
the same assignment in roles, and every document is compared with broker ids
replaced by roles. What else must differ is normalised, and only that: hosts,
ports, timestamps, topic ids, cluster ids, and the version (write count) of
``/controller_epoch`` and of a partition state when the two controllers
legitimately write it a different number of times. The differences
docs/cluster.md lists as deliberate ("Kafka 3.9 compared") are named where they
are allowed for.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from java_harness import ScriptSession
from kafka_fixtures import _cluster
from kafka_peers import KAFKA_3, KafkaCluster, java_command
from kafka_scripts import CONFIGS, ELECT, assert_same, run_steps
from kazoo.client import KazooClient
from zk_sides import (
    WAIT_S,
    Side,
    both,
    controller_epoch_matches,
    create_in_roles,
    exchange,
    in_roles,
    partition_view,
    shape,
    wait_for,
    without_epoch,
)

from trafka.brokerlite.dev.local_cluster import ClusterProcesses
from trafka.codec.errors import ErrorCode
from trafka.codec.framing import FrameReader
from trafka.codec.messages import k00_produce as produce_api
from trafka.codec.messages import k01_fetch as fetch_api
from trafka.codec.messages import k02_list_offsets as list_offsets_api
from trafka.codec.messages import k19_create_topics as ct
from trafka.codec.messages import k23_offset_for_leader_epoch as ofle
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response_frame, encode_request
from trafka.codec.records import decode_batch, encode_batch, iter_batches
from trafka.sdk.admin import NewTopic, UserScramCredentialUpsertion
from trafka.sdk.blocking import Producer

pytestmark = [pytest.mark.slow, pytest.mark.kafka]

# The same broker settings on both sides (over each one's test defaults):
# elections only when a scenario asks, a session that outlives a short pause.
SETTINGS = {
    "auto.leader.rebalance.enable": "false",
    "zookeeper.session.timeout.ms": "30000",
    "default.replication.factor": "1",
    "num.partitions": "1",
    "offsets.topic.replication.factor": "3",
}
# Kafka's side only: a broker stopped while it leads a partition no other in-sync
# replica can take (the unclean-election scenarios) fails its controlled shutdown,
# tries again twice after controlled.shutdown.retry.backoff.ms (5 s by default),
# then stops uncleanly; the same three attempts 0.5 s apart, not 10 s of waiting.
# (brokerlite stops at once in that case: nothing could take the leadership.)
KAFKA_SETTINGS = {**SETTINGS, "controlled.shutdown.retry.backoff.ms": "500"}
# The persistent znodes a Kafka 3.9 broker makes (ZkData.PersistentZkPaths, and
# the entity types of /config), which tools expect to find.
PERSISTENT = [
    "/consumers",
    "/brokers/ids",
    "/brokers/topics",
    "/brokers/seqid",
    "/config/changes",
    "/config/topics",
    "/config/clients",
    "/config/users",
    "/config/brokers",
    "/config/ips",
    "/admin/delete_topics",
    "/isr_change_notification",
    "/latest_producer_id_block",
    "/log_dir_event_notification",
]


# -- the clusters -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sides(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: Any, module_zk: str
) -> Iterator[tuple[Side, Side]]:
    """Kafka 3.9 (three brokers, a chroot of the suite's ZooKeeper) and brokerlite
    (three broker processes, another chroot), started together."""
    root = tmp_path_factory.mktemp("zkparity")
    kafka = _cluster(root / "kafka", zookeeper, KAFKA_3, 3, config=KAFKA_SETTINGS)
    brokerlite = ClusterProcesses(
        root / "brokerlite", 3, zookeeper_connect=module_zk, settings=dict(SETTINGS)
    )
    with contextlib.ExitStack() as stack:
        stack.callback(kafka.stop)  # kill -9: the data is thrown away
        stack.callback(brokerlite.stop)
        # brokerlite's nodes killed too, at once: stop's clean shutdowns, one after
        # the other, wrote state nothing reads again (seconds each under load)
        stack.callback(lambda: [brokerlite.kill(n) for n in list(brokerlite.procs)])
        # Kafka's brokers die with the thread that started them (their parent-death
        # signal): Kafka in this thread, brokerlite in another.
        failed: list[BaseException] = []

        def start_brokerlite() -> None:
            try:
                brokerlite.start(timeout=WAIT_S)
            except BaseException as exc:  # raised below, in the fixture's thread
                failed.append(exc)

        starting = threading.Thread(target=start_brokerlite)
        starting.start()
        try:
            kafka.start()
        finally:
            starting.join()
        if failed:
            raise failed[0]
        yield _kafka_side(kafka, stack), _brokerlite_side(brokerlite, stack)


def _zk(connect: str, stack: contextlib.ExitStack) -> KazooClient:
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=30.0)
    stack.callback(client.close)
    stack.callback(client.stop)
    return client


def _kafka_side(kafka: KafkaCluster, stack: contextlib.ExitStack) -> Side:
    def pause(node: int, paused: bool) -> None:
        kafka.node(node).signal(signal.SIGSTOP if paused else signal.SIGCONT)

    assert kafka.zookeeper is not None
    return Side(
        "kafka",
        _zk(kafka.zookeeper, stack),
        {n.node_id: n.address for n in kafka.nodes},
        lambda node: kafka.node(node).stop(),
        lambda node: kafka.start_node(node),
        pause,
    )


def _brokerlite_side(cluster: ClusterProcesses, stack: contextlib.ExitStack) -> Side:
    def pause(node: int, paused: bool) -> None:
        cluster.procs[node].send_signal(signal.SIGSTOP if paused else signal.SIGCONT)

    return Side(
        "brokerlite",
        _zk(cluster.zookeeper_connect, stack),
        {n: f"{cluster.host}:{p}" for n, p in sorted(cluster.ports.items())},
        cluster.stop_node,
        lambda node: cluster.start_node(node, timeout=WAIT_S),
        pause,
        cluster.zookeeper_connect,
        {n: cluster.root / f"node-{n}" for n in cluster.ports},
    )


# -- the scenarios ------------------------------------------------------------------------------


def test_the_tree_a_new_topic_and_a_config_change(sides: tuple[Side, Side]) -> None:
    """The persistent znodes, the broker, controller and cluster documents, a topic
    created with RF 3 and 3 partitions (placed by each cluster), and a topic config
    change (``/config/topics/T`` and its ``/config/changes`` notification)."""

    topic = "zkp-created"
    for side in sides:
        with side.admin() as admin:
            admin.create_topics([NewTopic(topic, 3, 3)])
            admin.alter_topic_configs({topic: {"retention.ms": "86400000"}})
    got: dict[str, dict[str, Any]] = {}
    for side in sides:
        missing = [p for p in PERSISTENT if side.zk.exists(p) is None]
        assert not missing, (side.name, missing)
        view: dict[str, Any] = {"root": set(side.children("/")) - {"zookeeper"}}
        for node, address in side.addresses.items():
            doc, _ = side.get(f"/brokers/ids/{node}") or (None, 0)
            assert doc["endpoints"] == [f"PLAINTEXT://{address}"], (side.name, doc)
            assert f"{doc['host']}:{doc['port']}" == address, (side.name, doc)
            view[f"broker {side.roles()[node]}"] = (shape(doc), doc["version"], doc["jmx_port"])
        controller, _ = side.get("/controller") or (None, 0)
        view["controller"] = (shape(controller), controller["version"])
        view["controller doc"] = {k: v for k, v in controller.items() if k != "timestamp"}
        view["controller doc"]["brokerid"] = side.roles()[controller["brokerid"]]
        view["controller_epoch"] = (side.get("/controller_epoch") or (None, 0))[0]
        view["cluster id"] = shape((side.get("/cluster/id") or (None, 0))[0])
        assignment, version = side.get(f"/brokers/topics/{topic}") or (None, 0)
        view["topic"] = (shape(assignment), version)
        placed = in_roles(side, assignment)["partitions"]
        view["placement"] = (
            sorted(rs[0] for rs in placed.values()),
            all(sorted(rs) == ["A", "B", "C"] for rs in placed.values()),
        )
        states = {}
        for p in range(3):
            doc, version = side.state(topic, p)
            controller_epoch_matches(side, doc)
            roles = in_roles(side, doc)
            states[p] = (
                sorted(doc),
                roles["leader"] == placed[str(p)][0],
                roles["isr"] == placed[str(p)],
                doc["leader_epoch"],
                doc["version"],
                version,
            )
        view["states"] = states
        view["config"] = side.get(f"/config/topics/{topic}")
        view["notifications"] = [
            side.zk.get(f"/config/changes/{c}")[0]
            for c in side.children("/config/changes")
            if json.loads(side.zk.get(f"/config/changes/{c}")[0])["entity_path"]
            == f"topics/{topic}"
        ]
        view["metadata"] = partition_view(side, topic, 3)
        got[side.name] = view
    k, b = got["kafka"], got["brokerlite"]
    # docs/cluster.md "Kafka 3.9 compared": Kafka's controller makes /feature,
    # brokerlite at the first UpdateFeatures (none here); brokerlite makes the
    # delegation token paths whether or not tokens are on.
    assert k.pop("root") - {"feature"} == b.pop("root") - {"delegation_token"}
    for p in range(3):
        for view in (k, b):
            meta = view["metadata"][p]
            assert meta["metadata"]["leader"] == meta["zk"]["leader"]
            assert meta["metadata"]["isr"] == meta["zk"]["isr"]
            assert meta["metadata"]["replicas"] == meta["zk"]["isr"]
            view["metadata"][p] = (meta["metadata"]["error"], meta["metadata"]["offline"])
    assert k == b
    assert k["notifications"] == [b'{"version":2,"entity_path":"topics/%s"}' % topic.encode()]
    assert k["config"] == ({"version": 1, "config": {"retention.ms": "86400000"}}, 1)


def test_validate_only_create_topics_answers_the_topic_it_would_make(
    sides: tuple[Side, Side],
) -> None:
    """CreateTopics v7 with ``validate_only`` (KIP-525: from v5 the result carries
    the partition count, replication factor and configs): the topic that would
    have been made, with -1s resolved to the brokers' defaults, and nothing made."""
    answers: dict[str, Any] = {}
    C = ct.CreateTopicsRequest
    for side in sides:
        body = C(
            topics=[
                C.CreatableTopic(
                    name="zkp-checked",
                    num_partitions=3,
                    replication_factor=3,
                    configs=[C.CreatableTopicConfig(name="retention.ms", value="5000")],
                ),
                C.CreatableTopic(name="zkp-defaults", num_partitions=-1, replication_factor=-1),
            ],
            timeout_ms=30_000,
            validate_only=True,
        )
        answer = exchange(side.addresses[side.controller()], 19, 7, body)
        answers[side.name] = [
            (
                t.name,
                t.error_code,
                t.error_message,
                t.num_partitions,
                t.replication_factor,
                t.topic_id.int,
                {c.name: (c.value, c.config_source) for c in t.configs if c.config_source == 1},
                {"retention.ms", "cleanup.policy", "min.insync.replicas"}
                <= {c.name for c in t.configs},
            )
            for t in answer.topics
        ]
        assert side.zk.exists("/brokers/topics/zkp-checked") is None
    assert answers["brokerlite"] == answers["kafka"]
    assert answers["kafka"][0][3:5] == (3, 3) and answers["kafka"][1][3:5] == (1, 1)


def test_a_reassignment_during_and_after(sides: tuple[Side, Side]) -> None:
    """AlterPartitionReassignments (KIP-455): a replica added while it cannot
    catch up (its broker paused) shows in ``adding_replicas`` and in
    ListPartitionReassignments, never in ``/admin/reassign_partitions``; once it
    is in sync the move completes. Then the leader is moved away."""
    topic = "zkp-moves"
    both(lambda side: create_in_roles(side, topic, {0: ["A"]}), sides)
    for side in sides:
        _write(side, topic, [b"before-0", b"before-1"])
    during: dict[str, Any] = {}
    # Leader epochs, as the move goes: compared apart (see below).
    epochs: dict[str, list[int]] = {
        side.name: [side.state(topic, 0)[0]["leader_epoch"]] for side in sides
    }
    for side in sides:
        ids = side.ids()
        side.pause(ids["B"], True)
        try:
            with side.admin() as admin:
                result = admin.alter_partition_reassignments({(topic, 0): [ids["A"], ids["B"]]})
                assert list(result.values()) == [None], (side.name, result)
                doc, _ = wait_for(
                    "the move written",
                    lambda side=side: (
                        (got := side.get(f"/brokers/topics/{topic}"))
                        and got[0]["adding_replicas"]
                        and got
                    ),
                )
                listed = admin.list_partition_reassignments()
                # the move's start bumps the leader epoch (below): once it shows
                wait_for(
                    f"{side.name}: the move started",
                    lambda side=side: (
                        side.state(topic, 0)[0]["leader_epoch"] > epochs[side.name][0]
                    ),
                )
                state = in_roles(side, side.state(topic, 0)[0])
                epochs[side.name].append(state.pop("leader_epoch"))
                during[side.name] = (
                    in_roles(side, doc),
                    side.get("/admin/reassign_partitions"),
                    state,
                    {
                        (tp.topic, tp.partition): tuple(
                            [side.roles()[b] for b in getattr(r, key)]
                            for key in ("replicas", "adding_replicas", "removing_replicas")
                        )
                        for tp, r in listed.items()
                        if tp.topic == topic
                    },
                )
        finally:
            side.pause(ids["B"], False)
    assert during["brokerlite"] == during["kafka"]
    assert during["kafka"][0]["adding_replicas"] == {"0": ["B"]}

    def done(side: Side, replicas: list[str]) -> Any:
        def check() -> Any:
            got = side.get(f"/brokers/topics/{topic}")
            state = side.state(topic, 0)[0]
            roles = side.roles()
            return (
                got
                and not got[0]["adding_replicas"]
                and not got[0]["removing_replicas"]
                and [roles[b] for b in got[0]["partitions"]["0"]] == replicas
                and sorted(roles[b] for b in state["isr"]) == sorted(replicas)
                and got
            )

        return wait_for(f"{side.name}: moved to {replicas}", check)

    after = both(lambda side: in_roles(side, done(side, ["A", "B"])[0]), sides)
    assert after[0] == after[1]
    added = both(
        lambda side: without_epoch(epochs[side.name], partition_view(side, topic, 1)), sides
    )
    assert added[0] == added[1]

    def move_leader(side: Side) -> Any:
        ids = side.ids()
        with side.admin() as admin:
            assert list(admin.alter_partition_reassignments({(topic, 0): [ids["B"]]}).values()) == [
                None
            ]
        done(side, ["B"])
        return without_epoch(epochs[side.name], partition_view(side, topic, 1))

    k, b = both(move_leader, sides)
    assert k == b
    assert k[0]["zk"]["leader"] == "B" and k[0]["zk"]["isr"] == ["B"]
    # What a client reads from the new leader: the records written before the
    # moves and one after; OffsetForLeaderEpoch for each epoch of the partition
    # answers the creation epoch (ending where the new leader's began) or the
    # current one (ending at the log end), whatever epochs lie between.
    read = both(
        lambda side: (_write(side, topic, [b"after"]), _log_on_leader(side, topic, 0)), sides
    )
    assert read[0][1] == read[1][1]
    assert read[0][1]["values"] == [b"before-0", b"before-1", b"after"]
    # Kafka's controller bumps the leader epoch when a move starts (its
    # LeaderAndIsr tells the replicas the new set) and again when it ends; so
    # does brokerlite's.
    assert epochs["brokerlite"] == epochs["kafka"]
    created, started, added_epoch, moved = epochs["kafka"]
    assert created < started < added_epoch < moved, epochs


def test_a_reassignment_written_to_zookeeper(sides: tuple[Side, Side]) -> None:
    """Kafka 3.9's controller still acts on a plan written to
    ``/admin/reassign_partitions`` (the way before KIP-455, which
    ``kafka-reassign-partitions --zookeeper`` used until Kafka 3.0; Kafka 3.9's
    KafkaController watches the znode's creation): each partition named moves
    to its target replicas, leaves the znode once there, and the znode is
    deleted when none is left; a partition of a topic that does not exist is
    dropped from it at once. The znode is written as those tools wrote it:
    ``{"version":1,"partitions":[{"topic","partition","replicas"}]}``."""
    topic = "zkp-zkmoves"
    both(lambda side: create_in_roles(side, topic, {0: ["A"], 1: ["A"]}), sides)

    def scenario(side: Side) -> Any:
        ids = side.ids()
        plan = [
            (topic, 0, [ids["B"]]),
            (topic, 1, [ids["A"], ids["C"]]),
            ("zkp-nosuch", 0, [ids["A"]]),
        ]
        doc = {
            "version": 1,
            "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in plan],
        }
        side.zk.create("/admin/reassign_partitions", json.dumps(doc).encode())

        def moved() -> bool:
            got = side.get(f"/brokers/topics/{topic}")
            assert got is not None
            replicas = in_roles(side, got[0])["partitions"]
            return (
                replicas == {"0": ["B"], "1": ["A", "C"]}
                and side.get("/admin/reassign_partitions") is None
            )

        wait_for(f"{side.name}: the plan carried out and the znode gone", moved)
        wait_for("C in sync", lambda: len(side.state(topic, 1)[0]["isr"]) == 2)
        view = partition_view(side, topic, 2)
        for p in view.values():  # epochs: compared apart (test_a_reassignment_during_and_after)
            del p["zk_version"], p["zk"]["leader_epoch"], p["metadata"]["leader_epoch"]
        return in_roles(side, side.get(f"/brokers/topics/{topic}")[0]), view

    k, b = both(scenario, sides)
    assert k == b
    assert k[1][0]["zk"]["leader"] == "B" and k[1][1]["metadata"]["replicas"] == ["A", "C"]


def test_isr_shrink_and_expand_then_preferred_election(sides: tuple[Side, Side]) -> None:
    """A follower stopped (controlled shutdown) leaves every ISR at once and leaders
    it held move (the controller bumps the epoch); back, it rejoins the ISR (the
    leader's change: same epoch); ElectLeaders (KIP-460) hands leadership back to
    the preferred replica, and answers ELECTION_NOT_NEEDED where it already leads."""
    topic = "zkp-isr"
    both(lambda side: create_in_roles(side, topic, {0: ["A", "B", "C"], 1: ["B", "C", "A"]}), sides)
    steps: dict[str, list[Any]] = {}

    def scenario(side: Side) -> list[Any]:
        ids = side.ids()
        seen = [partition_view(side, topic, 2)]
        side.stop(ids["A"])
        wait_for(
            "A out of every ISR",
            lambda: all(ids["A"] not in side.state(topic, p)[0]["isr"] for p in range(2)),
        )
        seen.append(partition_view(side, topic, 2))
        side.start(ids["A"])
        wait_for(
            "A back in every ISR",
            lambda: all(len(side.state(topic, p)[0]["isr"]) == 3 for p in range(2)),
        )
        seen.append(partition_view(side, topic, 2))
        with side.admin() as admin:
            elected = admin.elect_leaders([(topic, 0), (topic, 1)])
        seen.append({tp.partition: e.code.name if e else None for tp, e in elected.items()})
        wait_for("A leads again", lambda: side.state(topic, 0)[0]["leader"] == ids["A"])
        seen.append(partition_view(side, topic, 2))
        seen.append(side.children("/isr_change_notification"))
        return seen

    steps["kafka"], steps["brokerlite"] = both(scenario, sides)
    assert steps["brokerlite"] == steps["kafka"]
    stopped = steps["kafka"][1]
    assert stopped[0]["zk"]["leader"] == "B" and stopped[0]["metadata"]["offline"] == ["A"]
    assert steps["kafka"][3] == {0: None, 1: "ELECTION_NOT_NEEDED"}


def test_unclean_election_when_every_isr_member_is_down(sides: tuple[Side, Side]) -> None:
    """With ``unclean.leader.election.enable`` on the topic, a partition whose ISR
    members are all down stays offline (leader -1, the last ISR member kept) until
    a replica comes back; that one then leads though it was out of sync, and the
    old leader rejoins as a follower."""
    topic = "zkp-unclean"
    both(
        lambda side: create_in_roles(
            side, topic, {0: ["A", "B"]}, **{"unclean.leader.election.enable": "true"}
        ),
        sides,
    )

    def scenario(side: Side) -> list[Any]:
        ids = side.ids()
        side.stop(ids["B"])
        wait_for("B out of the ISR", lambda: side.state(topic, 0)[0]["isr"] == [ids["A"]])
        side.stop(ids["A"])
        wait_for("offline", lambda: side.state(topic, 0)[0]["leader"] == -1)
        seen = [partition_view(side, topic, 1)]
        side.start(ids["B"])
        wait_for("B leads", lambda: side.state(topic, 0)[0]["leader"] == ids["B"])
        seen.append(partition_view(side, topic, 1))
        side.start(ids["A"])
        wait_for("A follows", lambda: len(side.state(topic, 0)[0]["isr"]) == 2)
        seen.append(partition_view(side, topic, 1))
        return seen

    k, b = both(scenario, sides)
    # docs/cluster.md "Kafka 3.9 compared": Kafka marks the unclean leader
    # RECOVERING (KIP-704) until its next ISR change; brokerlite writes no mark.
    assert k[1][0]["zk"].pop("leader_recovery_state") == 1
    assert "leader_recovery_state" not in k[2][0]["zk"]
    assert b == k
    offline = k[0][0]
    assert offline["zk"]["leader"] == -1 and offline["zk"]["isr"] == ["A"]
    assert offline["metadata"]["error"] == "LEADER_NOT_AVAILABLE"
    assert k[2][0]["zk"]["isr"] == ["B", "A"]


def _write(side: Side, topic: str, values: list[bytes], partitions: tuple[int, ...] = (0,)) -> None:
    """``values`` to each of ``partitions``, acks=all, one at a time."""
    with Producer(bootstrap_servers=side.addresses[side.controller()], acks="all") as producer:
        for p in partitions:
            for value in values:
                producer.send_and_wait(topic, value, partition=p)


def _epoch_label(answered: int, current: int) -> str | int:
    """An epoch OffsetForLeaderEpoch answered: the first, the current, or another
    (relative to the current one)."""
    return "first" if answered == 0 else "current" if answered == current else answered - current


def _log_on_leader(side: Side, topic: str, partition: int) -> dict[str, Any]:
    """What a client reads from the partition's leader: Fetch (from offset 0, at
    the current leader epoch) and OffsetForLeaderEpoch for every epoch up to the
    current one (KIP-101/KIP-279: for each, the latest epoch at or below it that
    the leader's log knows, and where that epoch ends), as the distinct answers
    in epoch order, each epoch named by :func:`_epoch_label` (how many epochs a
    controller writes differs: see test_a_reassignment_during_and_after).

    The controller writes a new leader to ZooKeeper before the broker has taken
    the leadership from its LeaderAndIsr, on Kafka as on brokerlite; a client
    told NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH in
    that moment asks again, and so does this."""
    return wait_for(
        f"{topic}-{partition}'s leader serves it",
        lambda: (
            (read := _read_from_leader(side, topic, partition))["error"] not in (6, 74, 75) and read
        ),
    )


def _read_from_leader(side: Side, topic: str, partition: int) -> dict[str, Any]:
    state = side.state(topic, partition)[0]
    leader, epoch = side.addresses[state["leader"]], state["leader_epoch"]
    F = fetch_api.FetchRequest
    asked = F(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        topics=[
            F.FetchTopic(
                topic=topic,
                partitions=[
                    F.FetchPartition(
                        partition=partition,
                        current_leader_epoch=epoch,
                        fetch_offset=0,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
    )
    got = exchange(leader, 1, 12, asked).responses[0].partitions[0]
    E = ofle.OffsetForLeaderEpochRequest
    ends = exchange(
        leader,
        23,
        4,
        E(
            replica_id=-1,
            topics=[
                E.OffsetForLeaderTopic(
                    topic=topic,
                    partitions=[
                        E.OffsetForLeaderPartition(
                            partition=partition, current_leader_epoch=epoch, leader_epoch=e
                        )
                        for e in range(epoch + 1)
                    ],
                )
            ],
        ),
    ).topics[0]
    return {
        "error": got.error_code,
        "high_watermark": got.high_watermark,
        "values": [
            r.value for _, view in iter_batches(got.records) for r in decode_batch(view).records
        ],
        "epoch_ends": list(
            dict.fromkeys(
                (p.error_code, _epoch_label(p.leader_epoch, epoch), p.end_offset)
                for p in ends.partitions
            )
        ),
    }


@pytest.mark.compat(
    "Kafka scripts",
    "kafka-leader-election --election-type unclean (no live ISR member), 3 nodes",
    peer=("brokerlite", "Kafka 3.9"),
)
def test_unclean_election_by_the_script_and_by_the_topic_config(sides: tuple[Side, Side]) -> None:
    """A real unclean election. Both partitions of a topic (replicas A, B;
    ``unclean.leader.election.enable`` off, its default) take records while both
    replicas are in sync, then more once B has stopped and left the ISR; then A
    stops: no leader, the ISR still A. B comes back and, the topic's setting
    off, stays out: the partitions stay offline (Kafka's documentation,
    "Unclean leader election": only ISR members are elected unless it is on).
    Then ``kafka-leader-election --election-type unclean`` for partition 0
    (KIP-460: an unclean election on request, whatever the topic's setting) and
    ``kafka-configs --alter --add-config unclean.leader.election.enable=true``
    for the topic (Kafka 3.9's controller elects on that change) make B the
    leader of each: a new leader epoch, the ISR just B, and only the records B
    had (those written while it was out are lost: what "unclean" means). A comes
    back, truncates its log to B's (KIP-101: from OffsetForLeaderEpoch), and
    rejoins the ISR; a preferred election hands A the leadership back, and A
    serves the records B had, not its own lost ones."""
    topic = "zkp-forced"
    both(lambda side: create_in_roles(side, topic, {0: ["A", "B"], 1: ["A", "B"]}), sides)
    kept, lost = [b"kept-%d" % i for i in range(3)], [b"lost-%d" % i for i in range(2)]
    parts = (0, 1)

    def scenario(side: Side) -> dict[str, Any]:
        # The scripts' JVM starts now, beside the stops and starts below, and runs
        # both scripts (each its own JVM, some 2-4 s apiece, was on the way).
        with ScriptSession() as session:
            return steps(side, session)

    def steps(side: Side, session: ScriptSession) -> dict[str, Any]:
        ids = side.ids()
        state = lambda p: side.state(topic, p)[0]  # noqa: E731
        seen: dict[str, Any] = {}
        _write(side, topic, kept, parts)
        side.stop(ids["B"])
        wait_for("B out of the ISRs", lambda: all(state(p)["isr"] == [ids["A"]] for p in parts))
        _write(side, topic, lost, parts)
        side.stop(ids["A"])
        wait_for("offline", lambda: all(state(p)["leader"] == -1 for p in parts))
        side.start(ids["B"])
        seen["offline"] = partition_view(side, topic, 2)
        b = ["--bootstrap-server", side.addresses[ids["C"]]]
        elect = [*b, "--election-type", "unclean", "--topic", topic, "--partition", "0"]
        seen["elect"] = run_steps([("elect", ELECT, elect, None)], session=session)["elect"]
        seen["after elect"] = partition_view(side, topic, 2)
        configs = [*b, "--entity-type", "topics", "--entity-name", topic, "--alter"]
        setting = ["--add-config", "unclean.leader.election.enable=true"]
        seen["configs"] = run_steps(
            [("configs", CONFIGS, [*configs, *setting], None)], session=session
        )["configs"]
        wait_for("B leads both", lambda: all(state(p)["leader"] == ids["B"] for p in parts))
        seen["after config"] = partition_view(side, topic, 2)
        seen["read from B"] = [_log_on_leader(side, topic, p) for p in parts]
        side.start(ids["A"])
        wait_for("A back in the ISRs", lambda: all(len(state(p)["isr"]) == 2 for p in parts))
        with side.admin() as admin:
            elected = admin.elect_leaders([(topic, p) for p in parts])
        seen["preferred"] = {tp.partition: e.code.name if e else None for tp, e in elected.items()}
        wait_for("A leads both", lambda: all(state(p)["leader"] == ids["A"] for p in parts))
        seen["back"] = partition_view(side, topic, 2)
        seen["read from A"] = [_log_on_leader(side, topic, p) for p in parts]
        return seen

    k, b = both(scenario, sides)
    for name in ("elect", "configs"):
        assert_same(name, b.pop(name), k.pop(name))
    # docs/cluster.md "Kafka 3.9 compared": Kafka marks an uncleanly elected
    # leader RECOVERING (KIP-704) until its next ISR change; brokerlite does not.
    for step in ("after elect", "after config"):
        for p in parts:
            if k[step][p]["zk"]["leader"] == "B":
                assert k[step][p]["zk"].pop("leader_recovery_state") == 1, (step, p)
    differing = {
        step: {"brokerlite": b[step], "kafka": k.get(step)} for step in b if b[step] != k.get(step)
    }
    assert b == k, f"brokerlite and Kafka differ at: {differing}"
    offline, elected, back = k["offline"][0], k["after config"], k["back"]
    assert offline["zk"]["leader"] == -1 and offline["zk"]["isr"] == ["A"]
    assert k["after elect"][1]["zk"]["leader"] == -1  # the script named partition 0 only
    assert all(elected[p]["zk"]["isr"] == ["B"] for p in parts)
    assert all(read["values"] == kept for read in k["read from B"] + k["read from A"])
    assert k["preferred"] == {0: None, 1: None}
    assert all(back[p]["zk"]["leader"] == "A" for p in parts)


def _kafka_tool(main: str, *args: str) -> str:
    """A Kafka 3.9 tool's output (it must succeed)."""
    done = subprocess.run(
        java_command(main, *args, version=KAFKA_3),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert done.returncode == 0, f"{main} {args}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_kafkas_own_tools_read_and_change_brokerlites_state(sides: tuple[Side, Side]) -> None:
    """Kafka 3.9's tools that still work on ZooKeeper and on a broker's files, pointed
    at brokerlite's. ``kafka-configs --zookeeper`` (ConfigCommand; in 3.9 for users
    and brokers only, KIP-554) writes a user's SCRAM credential as Kafka's brokers
    read it (``/config/users/<user>`` and a ``/config/changes`` notification):
    brokerlite's brokers take it up; and it describes a credential brokerlite
    wrote. ``kafka-dump-log`` (DumpLogSegments) reads a brokerlite replica's
    segment as Kafka's log format, every batch valid."""
    brokerlite = sides[1]
    zk = ["--zookeeper", brokerlite.connect, "--entity-type", "users"]
    _kafka_tool(
        "kafka.admin.ConfigCommand",
        *zk,
        *("--entity-name", "zkp-alice", "--alter"),
        *("--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret]"),
    )
    with brokerlite.admin() as admin:
        seen = wait_for(
            "brokerlite takes up the credential kafka-configs wrote",
            lambda: admin.describe_user_scram_credentials().get("zkp-alice"),
        )
        assert [(c.mechanism, c.iterations) for c in seen.credential_infos] == [
            ("SCRAM-SHA-256", 8192)
        ]
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("zkp-bob", "bob-secret", "SCRAM-SHA-512", 4096)]
        )
    described = _kafka_tool(
        "kafka.admin.ConfigCommand", *zk, "--entity-name", "zkp-bob", "--describe"
    )
    assert re.search(
        r"SCRAM-SHA-512=salt=\S+,stored_key=\S+,server_key=\S+,iterations=4096", described
    ), described

    topic = "zkp-tools"
    create_in_roles(brokerlite, topic, {0: ["A", "B", "C"]})
    with Producer(bootstrap_servers=brokerlite.bootstrap, acks="all") as producer:
        for i in range(5):
            producer.send_and_wait(topic, b"value-%d" % i, key=b"key-%d" % i, partition=0)
    leader = brokerlite.ids()["A"]
    segment = brokerlite.log_dirs[leader] / f"{topic}-0" / "00000000000000000000.log"
    dumped = _kafka_tool("kafka.tools.DumpLogSegments", "--files", str(segment), "--print-data-log")
    batches = re.findall(r"^baseOffset: (\d+) lastOffset: (\d+) .* isvalid: (\w+)", dumped, re.M)
    assert batches and all(valid == "true" for *_, valid in batches), dumped
    assert [int(b[0]) for b in batches] == sorted({int(b[0]) for b in batches}), dumped
    for i in range(5):
        assert re.search(rf"\| offset: {i} .* key: key-{i} payload: value-{i}$", dumped, re.M), (
            dumped
        )


def test_a_produce_waiting_for_its_replicas_when_leadership_moves_names_the_new_leader(
    sides: tuple[Side, Side],
) -> None:
    """An acks=-1 Produce waits on its leader until the in-sync replicas have its
    records (Kafka's ``acks`` doc: "the leader will wait for the full set of
    in-sync replicas to acknowledge the record"). When the leadership moves
    meanwhile (here a preferred election, KIP-460, with one in-sync follower
    paused so the wait cannot end first), the old leader answers
    NOT_LEADER_OR_FOLLOWER, and from Produce v10 on that answer names the new
    leader, its epoch and its endpoint (KIP-951), as a refusal made at once does."""
    topic = "zkp-hint"
    # Leader C (the controller: it must keep answering), preferred A, follower B.
    both(lambda side: create_in_roles(side, topic, {0: ["C", "A", "B"]}), sides)

    def scenario(side: Side) -> dict[str, Any]:
        ids = side.ids()
        with side.admin() as admin:
            full = lambda: len(side.state(topic, 0)[0]["isr"]) == 3  # noqa: E731
            wait_for(f"{side.name}: the ISR is full", full)
            result = admin.alter_partition_reassignments(
                {(topic, 0): [ids["A"], ids["C"], ids["B"]]}
            )
            assert list(result.values()) == [None], (side.name, result)
            wait_for(
                f"{side.name}: A preferred, C still leads, the ISR full",
                lambda: (
                    (doc := side.get(f"/brokers/topics/{topic}"))
                    and doc[0]["partitions"]["0"][0] == ids["A"]
                    and not doc[0].get("adding_replicas")
                    and side.state(topic, 0)[0]["leader"] == ids["C"]
                    and full()
                ),
            )
            header = RequestHeader(
                request_api_key=0, request_api_version=11, correlation_id=7, client_id="zkparity"
            )
            P = produce_api.ProduceRequest
            body = P(
                acks=-1,
                timeout_ms=int(WAIT_S * 1000),
                topic_data=[
                    P.TopicProduceData(
                        name=topic,
                        partition_data=[
                            P.PartitionProduceData(
                                index=0, records=encode_batch([(0, None, b"waiting", [])])
                            )
                        ],
                    )
                ],
            )
            host, port = side.addresses[ids["C"]].rsplit(":", 1)
            side.pause(ids["B"], True)
            try:
                with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
                    sock.sendall(encode_request(header, body))
                    # Appended on C (its log end), not committed (B has not fetched it).
                    wait_for(
                        f"{side.name}: the record on C", lambda: _log_end(side, ids["C"], topic)
                    )
                    assert _read_from_leader(side, topic, 0)["high_watermark"] == 0
                    elected = admin.elect_leaders([(topic, 0)])
                    assert list(elected.values()) == [None], (side.name, elected)
                    reader = FrameReader()
                    while (frame := reader.next_frame()) is None:
                        data = sock.recv(65536)
                        assert data, f"{side.name}: C closed the connection"
                        reader.feed(data)
            finally:
                side.pause(ids["B"], False)
        answer = decode_response_frame(frame, 0, 11)
        [part] = answer.responses[0].partition_responses
        state = side.state(topic, 0)[0]
        roles = side.roles()
        return {
            "error": ErrorCode(part.error_code).name,
            "base_offset": part.base_offset,
            "log_append_time_ms": part.log_append_time_ms,
            "log_start_offset": part.log_start_offset,
            "hinted": roles.get(part.current_leader.leader_id, part.current_leader.leader_id),
            "hinted epoch is the state's": part.current_leader.leader_epoch
            == state["leader_epoch"],
            "leader": roles[state["leader"]],
            "endpoints": [
                (roles[e.node_id], f"{e.host}:{e.port}" == side.addresses[e.node_id])
                for e in answer.node_endpoints
            ],
        }

    kafka, brokerlite = both(scenario, sides)
    # The append's offset (and time, log start) stays in the error answer, as Kafka's.
    assert kafka == {
        "error": "NOT_LEADER_OR_FOLLOWER",
        "base_offset": 0,
        "log_append_time_ms": -1,
        "log_start_offset": 0,
        "hinted": "A",
        "hinted epoch is the state's": True,
        "leader": "A",
        "endpoints": [("A", True)],
    }, kafka
    assert brokerlite == kafka


def _log_end(side: Side, node: int, topic: str) -> int:
    """``node``'s log end offset of ``topic``-0: ListOffsets latest asked with the
    debugging replica id (-2), which both brokers answer to the log end, past
    the high watermark (a consumer's -1 stops at the high watermark)."""
    L = list_offsets_api.ListOffsetsRequest
    got = exchange(
        side.addresses[node],
        2,
        1,
        L(
            replica_id=-2,
            topics=[
                L.ListOffsetsTopic(
                    name=topic, partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-1)]
                )
            ],
        ),
    )
    return int(got.topics[0].partitions[0].offset)
