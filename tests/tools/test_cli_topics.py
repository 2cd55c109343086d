"""``trafka topics`` verbs modelled on kafka-topics.sh / kafka-configs.sh: describe
of every topic, its report options, ``alter`` (config overrides) and
``add-partitions``, against an in-process brokerlite; and the report rules
themselves (:mod:`trafka.tools.topic_health`), written from Kafka's
tool (``kafka-topics.sh --describe`` with ``--under-replicated-partitions``,
``--unavailable-partitions``, ``--under-min-isr-partitions`` and
``--at-min-isr-partitions``: its TopicCommand's partition description) and
KIP-455 (replicas being added by a reassignment)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from click.testing import CliRunner, Result
from unique_names import names as _names

from trafka.brokerlite import RunningBroker
from trafka.sdk import open_admin, open_producer
from trafka.tools.cli import main
from trafka.tools.topic_health import REPORTS, PartitionState, min_isr_of, reports_matching


def fresh(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def run(broker: RunningBroker, *args: str, ok: bool = True) -> Result:
    result = CliRunner().invoke(main, [*args, "-b", broker.bootstrap_servers])
    if ok:
        assert result.exit_code == 0, (result.output, result.exception)
    return result


# -- the rules ---------------------------------------------------------------------------------


def reports(
    state: PartitionState, min_isr: int | None = 2, live: tuple[int, ...] = (1, 2, 3)
) -> list[str]:
    return reports_matching(state, live_brokers=live, min_isr=min_isr)


def test_a_healthy_partition_is_in_no_report() -> None:
    assert reports(PartitionState(1, [1, 2, 3], [1, 2, 3])) == []


def test_under_replicated_is_fewer_in_sync_than_replicas() -> None:
    assert reports(PartitionState(1, [1, 2, 3], [1, 3]), min_isr=1) == ["under-replicated"]


def test_replicas_being_added_by_a_reassignment_do_not_count() -> None:
    # TopicCommand counts the replication factor without the adding replicas
    # (KIP-455): a copy on its way to broker 4 makes nothing under-replicated.
    moving = PartitionState(1, [1, 2, 3, 4], [1, 2, 3], adding=[4])
    assert reports(moving) == []
    assert reports(PartitionState(1, [1, 2, 3, 4], [1, 2, 3])) == ["under-replicated"]


def test_no_leader_is_unavailable_and_under_min_isr() -> None:
    # A partition without a leader: unavailable and under min ISR whatever its
    # ISR says (Kafka keeps the last replica in the ISR when it goes down). At
    # min ISR compares the ISR's size alone, so it lists this one too, as
    # TopicCommand's does.
    assert reports(PartitionState(-1, [2], [2]), min_isr=1) == [
        "unavailable",
        "under-min-isr",
        "at-min-isr",
    ]
    assert reports(PartitionState(-1, [2], [2]), min_isr=2) == ["unavailable", "under-min-isr"]


def test_a_leader_not_among_live_brokers_is_unavailable() -> None:
    assert "unavailable" in reports(PartitionState(3, [1, 3], [1, 3]), live=(1, 2))


def test_min_isr_reports_compare_with_the_topic_setting() -> None:
    assert reports(PartitionState(1, [1, 2, 3], [1]), min_isr=2) == [
        "under-replicated",
        "under-min-isr",
    ]
    assert reports(PartitionState(1, [1, 2, 3], [1, 2]), min_isr=2) == [
        "under-replicated",
        "at-min-isr",
    ]
    # Unknown min.insync.replicas: neither min-ISR report guesses.
    assert reports(PartitionState(1, [1, 2, 3], [1]), min_isr=None) == ["under-replicated"]


def test_only_the_asked_reports_are_given_and_names_are_checked() -> None:
    state = PartitionState(-1, [1, 2], [1])
    asked = reports_matching(
        state, live_brokers=(1,), min_isr=2, asked=["at-min-isr", "unavailable"]
    )
    assert asked == ["unavailable"]
    with pytest.raises(ValueError, match="under-replicated-partitions"):
        reports_matching(state, live_brokers=(1,), min_isr=2, asked=["under-replicated-partitions"])
    assert set(REPORTS) == {"under-replicated", "unavailable", "under-min-isr", "at-min-isr"}


def test_min_isr_of_reads_the_described_setting() -> None:
    assert min_isr_of({"min.insync.replicas": "2"}) == 2
    assert min_isr_of({"min.insync.replicas": None}) is None
    assert min_isr_of({}) is None


# -- against brokerlite ------------------------------------------------------------------------


def test_list_shows_internal_topics_unless_excluded(broker: RunningBroker) -> None:
    """``topics list`` lists Kafka's internal topics once the broker has made
    them (a group's coordinator looked up), as ``kafka-topics.sh --list`` does;
    ``--exclude-internal`` leaves them out. ``--internal``, the old way of
    asking for them, is still taken, and contradicts ``--exclude-internal``."""
    topic = fresh("plain")
    run(broker, "topics", "create", topic, "-p", "1")

    async def lookup() -> None:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            await admin.list_consumer_group_offsets(fresh("g"))  # (FindCoordinator)

    trio.run(lookup)
    every = json.loads(run(broker, "topics", "list", "--json").output)
    assert topic in every and every["__consumer_offsets"] >= 1
    assert "__consumer_offsets" in run(broker, "topics", "list").output.split()
    plain = json.loads(run(broker, "topics", "list", "--exclude-internal", "--json").output)
    assert plain == {k: v for k, v in every.items() if k != "__consumer_offsets"}
    assert json.loads(run(broker, "topics", "list", "--internal", "--json").output) == every
    refused = run(broker, "topics", "list", "--internal", "--exclude-internal", ok=False)
    assert refused.exit_code == 2 and "contradict" in refused.output


def described(broker: RunningBroker, *args: str) -> Any:
    return json.loads(run(broker, "topics", "describe", *args, "--json").output)


def test_describe_without_names_describes_every_topic(broker: RunningBroker) -> None:
    a, b = fresh("all-a"), fresh("all-b")
    run(broker, "topics", "create", a, "-p", "2")
    run(broker, "topics", "create", b, "-p", "1", "-c", "retention.ms=99000")

    async def listed() -> dict[str, int]:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            return await admin.list_topics(include_internal=True)

    every = trio.run(listed)
    got = {t["topic"]: len(t["partitions"]) for t in described(broker)}
    assert got == every
    assert got[a] == 2 and got[b] == 1
    internal = {n for n, t in ((t["topic"], t) for t in described(broker)) if t["internal"]}
    no_internal = {t["topic"] for t in described(broker, "--exclude-internal")}
    assert no_internal == set(every) - internal
    # Only topics with overrides, without partitions.
    overridden = described(broker, "--topics-with-overrides")
    assert b in {t["topic"] for t in overridden}
    assert a not in {t["topic"] for t in overridden}
    assert all("partitions" not in t and t["configs"] for t in overridden)
    text = run(broker, "topics", "describe", "--topics-with-overrides").output
    assert f"Topic: {b}" in text and "retention.ms=99000" in text and "PARTITION" not in text


def test_min_isr_reports_on_a_single_node(broker: RunningBroker) -> None:
    # RF 1 with min.insync.replicas=2 cannot take acks=all writes (the broker
    # refuses them with NOT_ENOUGH_REPLICAS): under min ISR. With 1 it is at it.
    short, at = fresh("short-isr"), fresh("at-isr")
    run(broker, "topics", "create", short, "-p", "2", "-c", "min.insync.replicas=2")
    run(broker, "topics", "create", at, "-p", "1", "-c", "min.insync.replicas=1")
    under = described(broker, short, at, "--under-min-isr-partitions")
    assert [(r["topic"], r["partition"], r["min_isr"]) for r in under] == [
        (short, 0, 2),
        (short, 1, 2),
    ]
    assert all(r["reports"] == ["under-min-isr"] for r in under)
    at_min = described(broker, short, at, "--at-min-isr-partitions")
    assert [(r["topic"], r["partition"]) for r in at_min] == [(at, 0)]
    # One node, every replica in sync, the leader alive: nothing else to report.
    assert (
        described(broker, short, at, "--under-replicated-partitions", "--unavailable-partitions")
        == []
    )
    text = run(broker, "topics", "describe", short, "--under-min-isr-partitions").output
    assert text.splitlines()[0].split() == [
        "TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "MIN.ISR", "REPORTS"
    ]  # fmt: skip
    assert "Configs:" not in text  # no topic header with a report asked, as kafka-topics
    usage = run(
        broker, "topics", "describe", "--at-min-isr-partitions", "--topics-with-overrides", ok=False
    )
    assert usage.exit_code == 2


def test_alter_sets_and_deletes_overrides_and_keeps_the_others(broker: RunningBroker) -> None:
    topic = fresh("alter")
    run(
        broker,
        "topics",
        "create",
        topic,
        "-c",
        "retention.ms=123456",
        "-c",
        "cleanup.policy=compact",
    )
    res = run(
        broker,
        "topics",
        "alter",
        topic,
        "--add-config",
        "max.message.bytes=2048",
        "--delete-config",
        "retention.ms",
    )
    assert (
        f"altered {topic}; overrides now: cleanup.policy=compact, max.message.bytes=2048"
        in res.output
    )
    (desc,) = described(broker, topic)
    assert desc["configs"] == {"cleanup.policy": "compact", "max.message.bytes": "2048"}

    async def effective() -> dict[str, str | None]:
        async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
            return (await admin.describe_configs(topics=[topic]))[topic]

    # The deleted override is back at the broker's value, not left at the old one.
    assert trio.run(effective)["retention.ms"] != "123456"
    # A value the broker refuses changes nothing and exits 1.
    bad = run(broker, "topics", "alter", topic, "-c", "cleanup.policy=sideways", ok=False)
    assert bad.exit_code == 1 and "INVALID_CONFIG" in bad.output
    (after,) = described(broker, topic)
    assert after["configs"] == desc["configs"]
    for args in (
        ["-c", "x"],
        ["--delete-config", "a=b"],
        [],
        ["-c", "a=1", "--delete-config", "a"],
    ):
        assert run(broker, "topics", "alter", topic, *args, ok=False).exit_code == 2, args
    missing = run(broker, "topics", "alter", fresh("nope"), "-c", "retention.ms=1", ok=False)
    assert missing.exit_code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.output
    run(broker, "topics", "alter", fresh("nope"), "-c", "retention.ms=1", "--if-exists")


def test_add_partitions_grows_the_topic_and_new_partitions_take_records(
    broker: RunningBroker,
) -> None:
    topic = fresh("grow")
    run(broker, "topics", "create", topic, "-p", "2")
    dry = run(broker, "topics", "add-partitions", topic, "-p", "5", "--dry-run")
    assert "can grow from 2 to 5 partitions (dry run)" in dry.output
    assert len(described(broker, topic)[0]["partitions"]) == 2
    res = run(broker, "topics", "add-partitions", topic, "-p", "5")
    assert f"{topic}: 2 -> 5 partitions" in res.output
    (desc,) = described(broker, topic)
    assert [p["partition"] for p in desc["partitions"]] == [0, 1, 2, 3, 4]

    async def write_to_new() -> list[int]:
        async with open_producer(bootstrap_servers=broker.bootstrap_servers) as producer:
            got = [await producer.send_and_wait(topic, b"v", partition=4) for _ in range(3)]
        return [m.offset for m in got]

    assert trio.run(write_to_new) == [0, 1, 2]
    assert described(broker, topic)[0]["partitions"][4]["latest_offset"] == 3
    # Not more than now: the controller's INVALID_PARTITIONS, nothing changed.
    same = run(broker, "topics", "add-partitions", topic, "-p", "5", ok=False)
    assert same.exit_code == 1 and "INVALID_PARTITIONS" in same.output
    assert len(described(broker, topic)[0]["partitions"]) == 5
    run(broker, "topics", "add-partitions", fresh("nope"), "-p", "3", "--if-exists")


def test_replica_assignment_places_partitions_as_kafka_topics_does(broker: RunningBroker) -> None:
    """kafka-topics' ``--replica-assignment``: partitions by commas from 0, each its
    brokers by colons; on ``--alter --partitions`` every partition is listed and
    those the topic has are skipped (Kafka's TopicCommand). A broker twice in a
    partition or partitions of different sizes are refused before any request,
    as kafka-topics refuses them; a broker that does not exist is the
    controller's INVALID_REPLICA_ASSIGNMENT."""
    probe = fresh("probe")
    run(broker, "topics", "create", probe, "-p", "1")
    node = described(broker, probe)[0]["partitions"][0]["leader"]
    topic = fresh("placed")
    run(broker, "topics", "create", topic, "--replica-assignment", f"{node},{node}")
    parts = described(broker, topic)[0]["partitions"]
    assert [(p["partition"], p["replicas"]) for p in parts] == [(0, [node]), (1, [node])]
    grown = run(
        broker,
        "topics",
        "add-partitions",
        topic,
        "-p",
        "3",
        "--replica-assignment",
        f"7,7,{node}",
    )
    assert f"{topic}: 2 -> 3 partitions" in grown.output  # (7 was skipped: partitions 0, 1)
    assert described(broker, topic)[0]["partitions"][2]["replicas"] == [node]
    for bad in ("1:1", f"{node},{node}:2", "x", ""):
        refused = run(
            broker, "topics", "create", fresh("bad"), "--replica-assignment", bad, ok=False
        )
        assert refused.exit_code == 2 and "--replica-assignment" in refused.output, bad
    both = run(
        broker, "topics", "create", fresh("bad"), "-p", "2", "--replica-assignment", "1", ok=False
    )
    assert both.exit_code == 2
    nowhere = run(broker, "topics", "create", fresh("bad"), "--replica-assignment", "99", ok=False)
    assert nowhere.exit_code == 1 and "INVALID_REPLICA_ASSIGNMENT" in nowhere.output
