"""Apache Kafka's own scripts against brokerlite, their output compared with the
same scripts against Apache Kafka 3.9 (ZooKeeper, brokerlite's era).

Each script is run as its main class with the arguments the ``.sh`` script
takes (kafka-topics is ``org.apache.kafka.tools.TopicCommand``...), the Kafka
4.4 tools against both brokers; the whole sequence runs in one JVM per broker
(``tests/interop/java/ScriptRunner.java``; the verifiable producer and
consumer each in a process of its own), the two brokers at once. Outputs
are compared after normalising only what must differ: topic ids, ports, the
log directory's path, segment sizes (batches cut at other moments), and what
docs/brokerlite.md lists as deliberate (the ELR columns: brokerlite serves
DescribeTopicPartitions as Kafka 4 does, Kafka 3.9 does not). The verifiable
producer and consumer are checked by their own accounting: everything acked
is consumed, once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import java_harness
import pytest
from kafka_peers import KAFKA_3, KAFKA_4, SKIP_ENV, KafkaCluster, java_command, missing

from trafka.brokerlite import broker_in_thread

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

TOOLS = "org.apache.kafka.tools."
TOPICS = TOOLS + "TopicCommand"
CONFIGS = TOOLS + "ConfigCommand"
GROUPS = TOOLS + "consumer.group.ConsumerGroupCommand"

_RUN = uuid.uuid4().hex[:8]
TOPIC = f"scripts-{_RUN}"
VERIFIABLE = f"scripts-verifiable-{_RUN}"
GROUP = f"scripts-g-{_RUN}"
VERIFIABLE_GROUP = f"scripts-vg-{_RUN}"
RECORDS = 12
VERIFIABLE_RECORDS = 300


def _commands(bs: str) -> list[tuple[str, str, list[str], str | None]]:
    """(name, main class, arguments, standard input) of each step, in order."""
    b = ["--bootstrap-server", bs]
    produced = "".join(f"h1:a{i},h2:b{i}\tk{i}:v{i}\n" for i in range(RECORDS))
    return [
        (
            "topics-create",
            TOPICS,
            [
                *b,
                "--create",
                "--topic",
                TOPIC,
                "--partitions",
                "3",
                "--replication-factor",
                "1",
                "--config",
                "retention.ms=3600000",
            ],
            None,
        ),
        ("topics-create-again", TOPICS, [*b, "--create", "--topic", TOPIC], None),
        ("topics-list", TOPICS, [*b, "--list"], None),
        ("topics-describe", TOPICS, [*b, "--describe", "--topic", TOPIC], None),
        (
            "topics-under-replicated",
            TOPICS,
            [*b, "--describe", "--under-replicated-partitions"],
            None,
        ),
        ("topics-unavailable", TOPICS, [*b, "--describe", "--unavailable-partitions"], None),
        ("topics-alter", TOPICS, [*b, "--alter", "--topic", TOPIC, "--partitions", "4"], None),
        ("topics-alter-down", TOPICS, [*b, "--alter", "--topic", TOPIC, "--partitions", "2"], None),
        ("topics-describe-altered", TOPICS, [*b, "--describe", "--topic", TOPIC], None),
        (
            "configs-describe-topic",
            CONFIGS,
            [*b, "--entity-type", "topics", "--entity-name", TOPIC, "--describe"],
            None,
        ),
        (
            "configs-alter-topic",
            CONFIGS,
            [
                *b,
                "--entity-type",
                "topics",
                "--entity-name",
                TOPIC,
                "--alter",
                "--add-config",
                "retention.ms=7200000,cleanup.policy=[delete,compact]",
            ],
            None,
        ),
        (
            "configs-describe-altered",
            CONFIGS,
            [*b, "--entity-type", "topics", "--entity-name", TOPIC, "--describe"],
            None,
        ),
        (
            "configs-delete-topic-configs",
            CONFIGS,
            [
                *b,
                "--entity-type",
                "topics",
                "--entity-name",
                TOPIC,
                "--alter",
                "--delete-config",
                "retention.ms,cleanup.policy",
            ],
            None,
        ),
        (
            "configs-describe-deleted",
            CONFIGS,
            [*b, "--entity-type", "topics", "--entity-name", TOPIC, "--describe"],
            None,
        ),
        (
            "configs-describe-broker",
            CONFIGS,
            [*b, "--entity-type", "brokers", "--entity-name", "1", "--describe"],
            None,
        ),
        (
            "console-producer",
            TOOLS + "ConsoleProducer",
            [
                *b,
                "--topic",
                TOPIC,
                "--property",
                "parse.key=true",
                "--property",
                "key.separator=:",
                "--property",
                "parse.headers=true",
            ],
            produced,
        ),
        (
            "console-consumer",
            TOOLS + "consumer.ConsoleConsumer",
            [
                *b,
                "--topic",
                TOPIC,
                "--from-beginning",
                "--max-messages",
                str(RECORDS),
                "--group",
                GROUP,
                "--timeout-ms",
                "30000",
                "--property",
                "print.key=true",
                "--property",
                "print.headers=true",
                "--property",
                "print.partition=true",
                "--property",
                "print.offset=true",
            ],
            None,
        ),
        ("groups-list", GROUPS, [*b, "--list"], None),
        ("groups-describe", GROUPS, [*b, "--describe", "--group", GROUP], None),
        ("groups-describe-state", GROUPS, [*b, "--describe", "--group", GROUP, "--state"], None),
        (
            "groups-reset-dry-run",
            GROUPS,
            [
                *b,
                "--reset-offsets",
                "--group",
                GROUP,
                "--topic",
                TOPIC,
                "--to-earliest",
                "--dry-run",
            ],
            None,
        ),
        (
            "groups-reset-execute",
            GROUPS,
            [
                *b,
                "--reset-offsets",
                "--group",
                GROUP,
                "--topic",
                TOPIC,
                "--shift-by",
                "-1",
                "--execute",
            ],
            None,
        ),
        (
            "groups-reset-to-offset",
            GROUPS,
            [
                *b,
                "--reset-offsets",
                "--group",
                GROUP,
                "--topic",
                f"{TOPIC}:0,1",
                "--to-offset",
                "1",
                "--execute",
            ],
            None,
        ),
        ("groups-describe-reset", GROUPS, [*b, "--describe", "--group", GROUP], None),
        ("get-offsets-latest", TOOLS + "GetOffsetShell", [*b, "--topic", TOPIC], None),
        (
            "get-offsets-earliest",
            TOOLS + "GetOffsetShell",
            [*b, "--topic", TOPIC, "--time", "-2"],
            None,
        ),
        (
            "log-dirs",
            TOOLS + "LogDirsCommand",
            [*b, "--describe", "--topic-list", TOPIC],
            None,
        ),
        ("transactions-list", TOOLS + "TransactionsCommand", [*b, "list"], None),
        (
            "transactions-describe-unknown",
            TOOLS + "TransactionsCommand",
            [*b, "describe", "--transactional-id", f"none-{_RUN}"],
            None,
        ),
        (
            "groups-delete-offsets",
            GROUPS,
            [*b, "--delete-offsets", "--group", GROUP, "--topic", TOPIC],
            None,
        ),
        ("groups-delete", GROUPS, [*b, "--delete", "--group", GROUP], None),
        (
            "verifiable-producer",
            TOOLS + "VerifiableProducer",
            [*b, "--topic", VERIFIABLE, "--max-messages", str(VERIFIABLE_RECORDS), "--acks", "-1"],
            None,
        ),
        (
            "verifiable-consumer",
            TOOLS + "VerifiableConsumer",
            [
                *b,
                "--topic",
                VERIFIABLE,
                "--group-id",
                VERIFIABLE_GROUP,
                "--max-messages",
                str(VERIFIABLE_RECORDS),
                "--reset-policy",
                "earliest",
            ],
            None,
        ),
        ("topics-delete", TOPICS, [*b, "--delete", "--topic", TOPIC], None),
    ]


NAMES = [name for name, *_ in _commands("")]


def _run(bs: str) -> dict[str, dict[str, Any]]:
    commands = _commands(bs)
    # The verifiable topic first, so that both brokers spread it alike.
    setup = (
        "topics-create-verifiable",
        TOPICS,
        ["--bootstrap-server", bs, "--create", "--topic", VERIFIABLE, "--partitions", "3"],
        None,
    )
    commands.insert(0, setup)
    # The verifiable tools print their summary from a JVM shutdown hook, and
    # their producer's callbacks from its own thread: each runs as a process.
    alone = [c for c in commands if c[0].startswith("verifiable-")]
    together = [c for c in commands if c not in alone]
    outcomes = java_harness.run_scripts(
        [(main, args, stdin) for _, main, args, stdin in together], timeout=480
    )
    found = {name: outcome for (name, *_), outcome in zip(together, outcomes, strict=True)}
    for name, main, args, _ in alone:
        done = subprocess.run(
            java_command(main, *args), capture_output=True, text=True, timeout=120, check=False
        )
        found[name] = {"exit": done.returncode, "out": done.stdout, "err": done.stderr}
    return found


@pytest.fixture(scope="module")
def outputs(
    tmp_path_factory: pytest.TempPathFactory, kafka3: KafkaCluster
) -> Iterator[dict[str, tuple[dict[str, Any], dict[str, Any]]]]:
    """Each step's outcome on brokerlite and on Kafka 3.9, run at the same time."""
    if os.environ.get(SKIP_ENV) != "1":
        why = missing("kafka", KAFKA_4) or missing("kafka", KAFKA_3)
        if why is not None:
            pytest.fail(why, pytrace=False)
    data = tmp_path_factory.mktemp("scripts")
    # brokerlite set up as the Kafka fixture's brokers are (tests/kafka_peers.py)
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=data,
        group_initial_rebalance_delay_ms=0,
        log_segment_bytes=16 << 20,
    ) as running:
        found: dict[str, dict[str, dict[str, Any]]] = {}
        kafka = threading.Thread(target=lambda: found.update(kafka=_run(kafka3.bootstrap_servers)))
        kafka.start()
        found["brokerlite"] = _run(running.bootstrap_servers)
        kafka.join(500)
        assert not kafka.is_alive(), "the scripts against Kafka 3.9 did not finish"
    yield {name: (found["brokerlite"][name], found["kafka"][name]) for name in found["kafka"]}


def normalise(text: str, bootstrap_names: tuple[str, ...] = ()) -> str:
    """What must differ between two brokers made the same."""
    text = re.sub(r"TopicId: \S+", "TopicId: <id>", text)
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text)
    text = re.sub(r'"logDir":"[^"]*"', '"logDir":"<dir>"', text)
    text = re.sub(r'"size":[1-9]\d*', '"size":"<bytes>"', text)
    # Deliberate (docs/brokerlite.md): brokerlite serves DescribeTopicPartitions,
    # whose ELR lists are empty; against Kafka 3.9 the tool falls back to Metadata.
    text = text.replace("\tElr: \tLastKnownElr: ", "\tElr: N/A\tLastKnownElr: N/A")
    # kafka-topics prints a topic's configs in the order DescribeConfigs lists
    # them, which in Kafka 3.9 is a Scala hash map's (ConfigHelper): no order to match.
    return re.sub(
        r"Configs: (\S*)", lambda m: "Configs: " + ",".join(sorted(m[1].split(","))), text
    )


def _ours(text: str) -> str:
    """Only the lines naming this run's topics and groups (Kafka 3.9 is shared)."""
    return "\n".join(line for line in text.splitlines() if _RUN in line)


COMPARED = [
    n for n in NAMES if n not in ("verifiable-producer", "verifiable-consumer", "console-consumer")
]


@pytest.mark.parametrize("name", COMPARED)
def test_script_output_is_kafkas(
    outputs: dict[str, tuple[dict[str, Any], dict[str, Any]]], name: str
) -> None:
    ours, kafka = outputs[name]
    pick = _ours if name in ("topics-list", "groups-list", "transactions-list") else str
    assert ours["exit"] == kafka["exit"], (name, ours, kafka)
    assert normalise(pick(ours["out"])) == normalise(pick(kafka["out"])), name
    assert normalise(pick(ours["err"])) == normalise(pick(kafka["err"])), name


def test_console_consumer_reads_what_the_console_producer_wrote(
    outputs: dict[str, tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    """The same records, keys, headers, partitions and offsets (the order between
    partitions is the fetches', so lines are compared sorted)."""
    ours, kafka = outputs["console-consumer"]
    assert ours["exit"] == kafka["exit"] == 0
    lines = sorted(line for line in ours["out"].splitlines() if line.startswith("Partition:"))
    assert lines == sorted(
        line for line in kafka["out"].splitlines() if line.startswith("Partition:")
    )
    assert len(lines) == RECORDS
    assert all(f"h1:a{i},h2:b{i}\tk{i}\tv{i}" in ours["out"] for i in range(RECORDS))
    assert ours["err"] == kafka["err"]


def _events(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("broker", ["brokerlite", "kafka"])
def test_verifiable_producer_and_consumer_account_for_every_record(
    outputs: dict[str, tuple[dict[str, Any], dict[str, Any]]], broker: str
) -> None:
    """Everything the verifiable producer had acked the verifiable consumer
    consumed, once, at the acked offsets; their summaries agree."""
    which = 0 if broker == "brokerlite" else 1
    produced = _events(outputs["verifiable-producer"][which]["out"])
    consumed = _events(outputs["verifiable-consumer"][which]["out"])
    acked = {
        (e["partition"], e["offset"]) for e in produced if e["name"] == "producer_send_success"
    }
    assert len(acked) == VERIFIABLE_RECORDS
    assert not [e for e in produced if e["name"] == "producer_send_error"]
    read: list[tuple[int, int]] = []
    for e in consumed:
        if e["name"] == "records_consumed":
            for p in e["partitions"]:
                read += [(p["partition"], o) for o in range(p["minOffset"], p["maxOffset"] + 1)]
    assert sorted(read) == sorted(acked)
    commits = [e for e in consumed if e["name"] == "offsets_committed"]
    assert commits and all(e["success"] for e in commits)
