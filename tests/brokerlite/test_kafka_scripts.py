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
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka_peers import KafkaCluster, java_command
from kafka_scripts import (
    CONFIGS,
    GROUPS,
    TOOLS,
    TOPICS,
    Step,
    assert_same,
    on_both,
    require_kafka,
    run_steps,
)

from trafka.brokerlite import broker_in_thread

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

_RUN = uuid.uuid4().hex[:8]
TOPIC = f"scripts-{_RUN}"
VERIFIABLE = f"scripts-verifiable-{_RUN}"
GROUP = f"scripts-g-{_RUN}"
VERIFIABLE_GROUP = f"scripts-vg-{_RUN}"
RESET = f"scripts-reset-{_RUN}"
RESET_GROUP = f"scripts-rg-{_RUN}"
PERF = f"scripts-perf-{_RUN}"
RECORDS = 12
VERIFIABLE_RECORDS = 300
PERF_RECORDS = 500
#: RESET's records: RESET_RECORDS a partition, the one at offset o of partition p
#: stamped RESET_BASE + o minutes + p seconds (fixed: --to-datetime picks offset 3).
RESET_RECORDS = 5
RESET_BASE = 1_704_067_200_000  # 2024-01-01T00:00:00Z
RESET_STRATEGIES = [
    ("to-earliest", ["--to-earliest"]),
    ("to-latest", ["--to-latest"]),
    ("to-current", ["--to-current"]),
    ("to-offset", ["--to-offset", "2"]),
    ("shift-by", ["--shift-by", "-1"]),
    ("to-datetime", ["--to-datetime", "2024-01-01T00:02:30.000Z"]),
    # ten years back: before every record, so each partition's first offset
    ("by-duration", ["--by-duration", "P3650D"]),
    ("from-file", ["--from-file"]),
]


def _commands(bs: str) -> list[Step]:
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


def _reset_commands(bs: str, plan: str) -> list[Step]:
    """kafka-consumer-groups --reset-offsets by every strategy, each with --dry-run
    then --execute and read back with --describe, on RESET's partitions 0 and 1
    (the group's first offsets), then with --all-topics; ``plan`` is the
    --from-file CSV. Then the perf tools, on a topic of their own."""
    b = ["--bootstrap-server", bs]
    found = []
    for scope, chosen in (("topic", ["--topic", f"{RESET}:0,1"]), ("all", ["--all-topics"])):
        for strategy, how in RESET_STRATEGIES:
            how = [*how, plan] if strategy == "from-file" else how
            for mode in ("dry-run", "execute"):
                argv = [*b, "--reset-offsets", "--group", RESET_GROUP, *chosen, *how, f"--{mode}"]
                found.append((f"reset-{scope}-{strategy}-{mode}", GROUPS, argv, None))
            describe = [*b, "--describe", "--group", RESET_GROUP, "--offsets"]
            found.append((f"reset-{scope}-{strategy}-describe", GROUPS, describe, None))
    create = [*b, "--create", "--topic", PERF, "--partitions", "3"]
    producer = ["--topic", PERF, "--num-records", str(PERF_RECORDS), "--record-size", "100"]
    producer += ["--throughput", "-1", "--producer-props", f"bootstrap.servers={bs}", "acks=all"]
    consumer = [*b, "--topic", PERF, "--messages", str(PERF_RECORDS), "--timeout", "60000"]
    return [
        *found,
        ("topics-create-perf", TOPICS, create, None),
        ("producer-perf-test", TOOLS + "ProducerPerformance", producer, None),
        ("consumer-perf-test", TOOLS + "ConsumerPerformance", consumer, None),
    ]


async def _seed(bs: str) -> None:
    """RESET, written with fixed timestamps (kept forever: they are old)."""
    import trio

    from trafka.sdk import NewTopic, open_admin, open_producer

    with trio.fail_after(120):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(RESET, 3, configs={"retention.ms": "-1"})])
        async with open_producer(bootstrap_servers=bs, acks=-1) as producer:
            sent = [
                await producer.send(
                    RESET, b"v", partition=p, timestamp_ms=RESET_BASE + o * 60_000 + p * 1000
                )
                for p in range(3)
                for o in range(RESET_RECORDS)
            ]
        for future in sent:
            await future


NAMES = [name for name, *_ in _commands("") + _reset_commands("", "")]
PERF_STEPS = ("producer-perf-test", "consumer-perf-test")


def _run(bs: str, plan: str) -> dict[str, dict[str, Any]]:
    import trio

    trio.run(_seed, bs)
    commands = _commands(bs) + _reset_commands(bs, plan)
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
    found = run_steps([c for c in commands if c not in alone])
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
    require_kafka()
    data = tmp_path_factory.mktemp("scripts")
    plan = data / "plan.csv"
    plan.write_text(f"{RESET},0,4\n{RESET},1,1\n{RESET},2,3\n")
    # brokerlite set up as the Kafka fixture's brokers are (tests/kafka_peers.py)
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=data,
        group_initial_rebalance_delay_ms=0,
        log_segment_bytes=16 << 20,
    ) as running:
        yield on_both(
            lambda: _run(running.bootstrap_servers, str(plan)),
            lambda: _run(kafka3.bootstrap_servers, str(plan)),
        )


def _ours(text: str) -> str:
    """Only the lines naming this run's topics and groups (Kafka 3.9 is shared)."""
    return "\n".join(line for line in text.splitlines() if _RUN in line)


COMPARED = [
    n
    for n in NAMES
    if n not in ("verifiable-producer", "verifiable-consumer", "console-consumer", *PERF_STEPS)
]


#: The row of docs/compatibility.md ("Kafka scripts") each step proves: one a
#: script's action; the reset steps by their strategy.
FEATURES = {
    "topics-create-verifiable": "kafka-topics --create",
    "topics-create": "kafka-topics --create",
    "topics-create-again": "kafka-topics --create",
    "topics-create-perf": "kafka-topics --create",
    "topics-list": "kafka-topics --list",
    "topics-describe": "kafka-topics --describe",
    "topics-describe-altered": "kafka-topics --describe",
    "topics-under-replicated": "kafka-topics --describe --under-replicated-partitions",
    "topics-unavailable": "kafka-topics --describe --unavailable-partitions",
    "topics-alter": "kafka-topics --alter --partitions",
    "topics-alter-down": "kafka-topics --alter --partitions",
    "topics-delete": "kafka-topics --delete",
    "configs-describe-topic": "kafka-configs --entity-type topics --describe",
    "configs-describe-altered": "kafka-configs --entity-type topics --describe",
    "configs-describe-deleted": "kafka-configs --entity-type topics --describe",
    "configs-alter-topic": "kafka-configs --entity-type topics --alter --add-config",
    "configs-delete-topic-configs": "kafka-configs --entity-type topics --alter --delete-config",
    "configs-describe-broker": "kafka-configs --entity-type brokers --describe",
    "console-producer": "kafka-console-producer",
    "console-consumer": "kafka-console-consumer",
    "groups-list": "kafka-consumer-groups --list",
    "groups-describe": "kafka-consumer-groups --describe",
    "groups-describe-state": "kafka-consumer-groups --describe --state",
    "groups-describe-reset": "kafka-consumer-groups --describe",
    "groups-reset-dry-run": "kafka-consumer-groups --reset-offsets --to-earliest",
    "groups-reset-execute": "kafka-consumer-groups --reset-offsets --shift-by",
    "groups-reset-to-offset": "kafka-consumer-groups --reset-offsets --to-offset",
    "groups-delete-offsets": "kafka-consumer-groups --delete-offsets",
    "groups-delete": "kafka-consumer-groups --delete",
    "get-offsets-latest": "kafka-get-offsets",
    "get-offsets-earliest": "kafka-get-offsets",
    "log-dirs": "kafka-log-dirs --describe",
    "transactions-list": "kafka-transactions list",
    "transactions-describe-unknown": "kafka-transactions describe",
    "verifiable-producer": "kafka-verifiable-producer, kafka-verifiable-consumer",
    "verifiable-consumer": "kafka-verifiable-producer, kafka-verifiable-consumer",
    "producer-perf-test": "kafka-producer-perf-test, kafka-consumer-perf-test",
    "consumer-perf-test": "kafka-producer-perf-test, kafka-consumer-perf-test",
}
FEATURES.update(
    {
        f"reset-{scope}-{strategy}-{step}": f"kafka-consumer-groups --reset-offsets --{strategy}"
        for scope in ("topic", "all")
        for strategy, _ in RESET_STRATEGIES
        for step in ("dry-run", "execute", "describe")
    }
)


def compared(name: str, peer: str | tuple[str, ...] = ("brokerlite", "Kafka 3.9")) -> Any:
    """A step as a test parameter, marked with its row of the compatibility page
    (a differential test: passing, it proves the script on both brokers)."""
    return pytest.param(name, marks=pytest.mark.compat("Kafka scripts", FEATURES[name], peer=peer))


@pytest.mark.parametrize("name", [compared(n) for n in COMPARED])
def test_script_output_is_kafkas(
    outputs: dict[str, tuple[dict[str, Any], dict[str, Any]]], name: str
) -> None:
    ours, kafka = outputs[name]
    pick = _ours if name in ("topics-list", "groups-list", "transactions-list") else str
    assert_same(name, ours, kafka, pick)


@pytest.mark.parametrize(
    "strategy", [compared(f"reset-topic-{s}-execute") for s, _ in RESET_STRATEGIES]
)
def test_every_reset_strategy_moved_the_groups_offsets_on_kafka(
    outputs: dict[str, tuple[dict[str, Any], dict[str, Any]]], strategy: str
) -> None:
    """The reset comparisons are not of two refusals: on Kafka 3.9 each strategy's
    --execute succeeded and --describe reads the offsets it printed back; the
    scope --topic t:0,1 named partitions 0 and 1 only, --all-topics (the group's
    partitions with an offset) all of them.
    (KIP-122; Kafka's operations guide, "Managing Consumer Groups")."""
    for scope in ("topic", "all"):
        step = strategy.replace("reset-topic-", f"reset-{scope}-")
        _, done = outputs[step]
        _, read = outputs[step.replace("-execute", "-describe")]
        assert done["exit"] == read["exit"] == 0, (step, done, read)
        new = _offsets(done["out"], "NEW-OFFSET")
        current = _offsets(read["out"], "CURRENT-OFFSET")
        assert new and {p: current.get(p) for p in new} == new, (step, done["out"], read["out"])
        if scope == "topic" and strategy != "reset-topic-from-file-execute":
            assert set(new) == {0, 1}, (step, done["out"])


def _offsets(table: str, column: str) -> dict[int, int]:
    """partition -> the column's offset, from a kafka-consumer-groups table of RESET."""
    lines = [line.split() for line in table.splitlines() if line.strip()]
    head = next(line for line in lines if "PARTITION" in line)
    return {
        int(line[head.index("PARTITION")]): int(line[head.index(column)])
        for line in lines
        if RESET in line
    }


@pytest.mark.parametrize("peer", ["brokerlite", "3.9"])
@pytest.mark.compat("Kafka scripts", FEATURES["producer-perf-test"])
def test_perf_tools_complete_and_count_every_record(
    outputs: dict[str, tuple[dict[str, Any], dict[str, Any]]], peer: str
) -> None:
    """kafka-producer-perf-test sends every record (its final line counts them),
    kafka-consumer-perf-test consumes as many (its data.consumed.in.nMsg column)."""
    produced, consumed = (outputs[s][0 if peer == "brokerlite" else 1] for s in PERF_STEPS)
    assert produced["exit"] == consumed["exit"] == 0, (produced, consumed)
    assert f"\n{PERF_RECORDS} records sent," in "\n" + produced["out"], produced["out"]
    head, row = [line.split(", ") for line in consumed["out"].strip().splitlines()[-2:]]
    assert int(row[head.index("data.consumed.in.nMsg")]) == PERF_RECORDS, consumed["out"]


@pytest.mark.compat("Kafka scripts", FEATURES["console-consumer"], peer=("brokerlite", "Kafka 3.9"))
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


@pytest.mark.parametrize("peer", ["brokerlite", "3.9"])
@pytest.mark.compat("Kafka scripts", FEATURES["verifiable-producer"])
def test_verifiable_producer_and_consumer_account_for_every_record(
    outputs: dict[str, tuple[dict[str, Any], dict[str, Any]]], peer: str
) -> None:
    """Everything the verifiable producer had acked the verifiable consumer
    consumed, once, at the acked offsets; their summaries agree."""
    which = 0 if peer == "brokerlite" else 1
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
