"""Kafka's cluster scripts against three brokerlite nodes on ZooKeeper, their
output compared with the same scripts against three Kafka 3.9 brokers on
ZooKeeper.

The replication factor of a topic raised from 1 to 3 the way Kafka's
operations guide does it ("Increasing replication factor": a reassignment
whose plan lists more replicas), with kafka-reassign-partitions ``--generate``,
``--execute --throttle`` and ``--verify`` (which removes the throttle, KIP-73);
kafka-leader-election ``--election-type preferred`` (KIP-460) moving
leadership to the first replicas the plan named, then, with one node stopped,
kafka-topics ``--describe --under-replicated-partitions`` and an ``unclean``
election where every partition still has a leader.

The steps run in one ScriptRunner JVM per cluster, phase after phase, the two
clusters at once; between phases the test waits for every node to know the new topic
(a script run at once may meet one that does not yet, on Kafka too), then
(through trafka's admin client) for the moves to finish, and for the stopped
node to leave the ISRs. Node 3 may be a cluster's controller: on Kafka 3.9 the
nodes left may still name it for a while, and answer NOT_CONTROLLER to the
admin client's ListPartitionReassignments until it finds the new one (it once
asked node 3's old name until its deadline: sdk/calls.py's rules).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from java_harness import ScriptSession
from kafka_peers import KAFKA_3, KafkaCluster, wait_topic_everywhere
from kafka_scripts import (
    CONFIGS,
    ELECT,
    REASSIGN,
    TOPICS,
    Outcome,
    Step,
    assert_same,
    on_both,
    require_kafka,
    run_steps,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(900)]

_RUN = uuid.uuid4().hex[:8]
TOPIC = f"cluster-{_RUN}"
#: The plan: every partition onto the three brokers, its old replica not first
#: (the preferred election then moves partitions 0 and 1).
PLAN = {0: [2, 3, 1], 1: [3, 1, 2], 2: [1, 2, 3]}
#: Both clusters alike (segment.bytes as kafka_peers' brokers have it: topics list it).
SETTINGS = {
    "auto.leader.rebalance.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "log.segment.bytes": str(16 << 20),
}


def _files(folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "topics": {"version": 1, "topics": [{"topic": TOPIC}]},
        "plan": {
            "version": 1,
            "partitions": [
                {"topic": TOPIC, "partition": p, "replicas": r} for p, r in PLAN.items()
            ],
        },
        "partitions": {"partitions": [{"topic": TOPIC, "partition": p} for p in PLAN]},
    }
    for name, content in files.items():
        (folder / f"{name}.json").write_text(json.dumps(content))
    return {name: str(folder / f"{name}.json") for name in files}


def _phases(bs: str, files: dict[str, str]) -> list[list[Step]]:
    b = ["--bootstrap-server", bs]
    topic = ["--entity-type", "topics", "--entity-name", TOPIC, "--describe"]
    broker = ["--entity-type", "brokers", "--entity-name", "1", "--describe"]
    plan = ["--reassignment-json-file", files["plan"]]
    elect = [*b, "--path-to-json-file", files["partitions"], "--election-type"]
    describe = [*b, "--describe", "--topic", TOPIC]
    return [
        [
            ("topics-create", TOPICS, [*b, "--create", "--topic", TOPIC, "--replica-assignment", "1,2,3"], None),
        ],
        [
            ("topics-describe", TOPICS, describe, None),
            ("reassign-generate", REASSIGN, [*b, "--topics-to-move-json-file", files["topics"], "--broker-list", "1,2,3", "--generate"], None),
            ("reassign-execute", REASSIGN, [*b, *plan, "--execute", "--throttle", "50000000"], None),
            ("configs-throttled-topic", CONFIGS, [*b, *topic], None),
            ("configs-throttled-broker", CONFIGS, [*b, *broker], None),
        ],
        [
            ("reassign-verify", REASSIGN, [*b, *plan, "--verify"], None),
            ("configs-unthrottled-topic", CONFIGS, [*b, *topic], None),
            ("configs-unthrottled-broker", CONFIGS, [*b, *broker], None),
            ("topics-describe-reassigned", TOPICS, describe, None),
            ("elect-preferred", ELECT, [*elect, "preferred"], None),
            ("topics-describe-elected", TOPICS, describe, None),
        ],
        [
            ("topics-under-replicated", TOPICS, [*describe, "--under-replicated-partitions"], None),
            ("elect-unclean", ELECT, [*elect, "unclean"], None),
        ],
    ]  # fmt: skip


async def _wait(bs: str, done: Callable[[Any], bool]) -> None:
    """Poll the topic's description until ``done`` (no fixed sleeps); past the
    bound, say what the brokers showed last."""
    import trio

    from trafka.sdk import open_admin

    seen: tuple[Any, Any] = (None, None)
    try:
        with trio.fail_after(240):
            async with open_admin(bootstrap_servers=bs) as admin:
                while True:
                    moving = await admin.list_partition_reassignments()
                    info = (await admin.describe_topics([TOPIC]))[TOPIC]
                    seen = (moving, info)
                    if not moving and done(info):
                        return
                    await trio.sleep(0.5)
    except trio.TooSlowError:
        moving, info = seen
        raise AssertionError(
            f"{bs}: {done.__name__} not true within 240 s; last seen: moves {moving}, {info}"
        ) from None


def _moved(info: Any) -> bool:
    return all(sorted(p.isr) == [1, 2, 3] for p in info.partitions)


def _without_3(info: Any) -> bool:
    return all(3 not in p.isr and p.leader != 3 for p in info.partitions)


def _run(bs: str, live: str, folder: Path, stop: Callable[[int], None]) -> dict[str, Outcome]:
    """The phases against one cluster; ``live``: its nodes 1 and 2 (node 3 stopped
    for the last phase, whose admin client would try it otherwise)."""
    import trio

    files = _files(folder)
    create, first, second, _ = _phases(bs, files)
    with ScriptSession() as session:
        found = run_steps(create, session=session)
        wait_topic_everywhere(bs, TOPIC, len(PLAN))
        found |= run_steps(first, session=session)
        trio.run(_wait, bs, _moved)
        found |= run_steps(second, session=session)
        stop(3)
        trio.run(_wait, live, _without_3)
        return found | run_steps(_phases(live, files)[3], session=session)


@pytest.fixture(scope="module")
def outputs(
    tmp_path_factory: pytest.TempPathFactory, module_zk: str
) -> Iterator[dict[str, tuple[Outcome, Outcome]]]:
    """Each step's outcome on the brokerlite cluster and the Kafka 3.9 cluster."""
    from trafka.brokerlite.dev.local_cluster import ClusterProcesses

    require_kafka()
    data = tmp_path_factory.mktemp("scripts-cluster")
    kafka = KafkaCluster(
        KAFKA_3, data / "kafka", nodes=3, zookeeper=f"{module_zk}/kafka", config=SETTINGS
    )
    ours = ClusterProcesses(data / "brokerlite", 3, settings=SETTINGS, zookeeper_connect=module_zk)
    with kafka:
        try:
            # a generous start: the machine is shared
            ours.start(timeout=180)
            live = f"{ours.host}:{ours.ports[1]},{ours.host}:{ours.ports[2]}"
            yield on_both(
                lambda: _run(ours.bootstrap_servers, live, data / "on-brokerlite", ours.stop_node),
                lambda: _run(
                    kafka.bootstrap_servers,
                    f"{kafka.node(1).address},{kafka.node(2).address}",
                    data / "on-kafka",
                    lambda node: kafka.node(node).stop(),
                ),
            )
        finally:
            ours.stop()


def _proposed_hidden(text: str) -> str:
    """--generate's proposal, a random placement (Kafka's assignment starts at a
    random broker), checked for its shape and then hidden."""
    head, sep, proposal = text.partition("Proposed partition reassignment configuration\n")
    if not sep:
        return text
    plan = json.loads(proposal)
    assert sorted(p["partition"] for p in plan["partitions"]) == [0, 1, 2], proposal
    assert all(
        len(p["replicas"]) == 1 and p["replicas"][0] in (1, 2, 3) for p in plan["partitions"]
    )
    return head + sep + "<proposal>\n"


FEATURES = {
    "topics-create": None,
    "topics-describe": None,
    "reassign-generate": "kafka-reassign-partitions --generate (3 nodes)",
    **{
        name: "kafka-reassign-partitions --execute --throttle, --verify: replication factor 1 to 3"
        for name in (
            "reassign-execute", "configs-throttled-topic", "configs-throttled-broker", "reassign-verify",
            "configs-unthrottled-topic", "configs-unthrottled-broker", "topics-describe-reassigned",
        )
    },
    "elect-preferred": "kafka-leader-election --election-type preferred",
    "topics-describe-elected": "kafka-leader-election --election-type preferred",
    "topics-under-replicated": "kafka-topics --describe --under-replicated-partitions (a node down)",
    "elect-unclean": "kafka-leader-election --election-type unclean (leaders alive)",
}  # fmt: skip


def _step(name: str) -> Any:
    feature = FEATURES[name]
    if feature is None:
        return name
    mark = pytest.mark.compat("Kafka scripts", feature, peer=("brokerlite", "Kafka 3.9"))
    return pytest.param(name, marks=mark)


def _cluster_normalised(text: str) -> str:
    """Besides kafka_scripts.normalise: the proposal (above), log directories (each
    cluster's own), and the order of an ISR, which is the order the followers
    caught up in (a race in Kafka too)."""
    text = re.sub(r'"log_dirs":\["/[^"]*"\]', '"log_dirs":["<dir>"]', _proposed_hidden(text))
    return re.sub(
        r"Isr: ([\d,]+)", lambda m: "Isr: " + ",".join(sorted(m[1].split(","), key=int)), text
    )


@pytest.mark.parametrize("name", [_step(n) for n in FEATURES])
def test_script_output_is_kafkas(outputs: dict[str, tuple[Outcome, Outcome]], name: str) -> None:
    ours, kafka = outputs[name]
    assert kafka["exit"] != "lost", kafka
    mine, theirs = ({**o, "out": _cluster_normalised(o["out"])} for o in (ours, kafka))
    assert_same(name, mine, theirs)


def test_the_moves_happened_on_kafka(outputs: dict[str, tuple[Outcome, Outcome]]) -> None:
    """The comparisons are of things done: on Kafka 3.9 the replication factor
    went from 1 to 3 (Kafka's operations guide, "Increasing replication
    factor"), --verify removed the throttles, the preferred election moved
    partitions 0 and 1 to their first replicas, and with node 3 down every
    partition was under-replicated."""
    kafka = {name: pair[1] for name, pair in outputs.items()}
    assert "ReplicationFactor: 3" in kafka["topics-describe-reassigned"]["out"]
    assert "Clearing topic-level throttles" in kafka["reassign-verify"]["out"]
    assert "throttled" not in kafka["configs-unthrottled-broker"]["out"]
    leaders = re.findall(r"Partition: (\d)\tLeader: (\d)", kafka["topics-describe-elected"]["out"])
    assert leaders == [("0", "2"), ("1", "3"), ("2", "1")], kafka["topics-describe-elected"]
    assert len(kafka["topics-under-replicated"]["out"].strip().splitlines()) == 3
