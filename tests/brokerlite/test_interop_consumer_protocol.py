"""The new consumer group protocol (KIP-848) with a real client: librdkafka
(confluent-kafka) with ``group.protocol=consumer`` against brokerlite. (Debian's
kcat links a librdkafka too old for it; kafka-python and aiokafka speak only the
classic protocol.)"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, ConsumerGroupType, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.sdk import open_admin
from trafka.tools.cli import main

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_in_thread(
        port=0,
        data_dir=tmp_path / "data",
        group_initial_rebalance_delay_ms=0,
        group_consumer_min_heartbeat_interval_ms=300,
        group_consumer_heartbeat_interval_ms=300,
        group_consumer_min_session_timeout_ms=6_000,
        group_consumer_session_timeout_ms=6_000,
    ) as running:
        yield running


def create(servers: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def produce(servers: str, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
    for i in values:
        producer.produce(topic, b"%d" % i, key=b"k%d" % i)
    assert producer.flush(30) == 0


def consumer(servers: str, group: str, topic: str, **extra: Any) -> Consumer:
    c = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )
    c.subscribe([topic])
    return c


def poll_all(
    consumers: list[Consumer], seen: dict[Consumer, list[int]], until: Any, timeout: float = 40
) -> None:
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None:
                seen.setdefault(c, []).append(int(msg.value()))
                c.commit(msg, asynchronous=True)
    assert until(), "timed out"


async def trafka_groups(servers: str) -> tuple[list[Any], Any]:
    async with open_admin(bootstrap_servers=servers) as admin:
        return await admin.list_groups(), (await admin.describe_groups(["g2"]))["g2"]


def close(*consumers: Consumer) -> None:
    # Also after a failure: a consumer left open retries its broker forever.
    for c in consumers:
        with contextlib.suppress(RuntimeError):  # already closed
            c.close()


def partitions(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def test_members_share_the_partitions_and_hand_them_over(broker: RunningBroker) -> None:
    servers, topic = broker.bootstrap_servers, "kip848-share"
    create(servers, topic, 6)
    produce(servers, topic, range(300))
    seen: dict[Consumer, list[int]] = {}
    a = consumer(servers, "g1", topic)
    b = consumer(servers, "g1", topic)
    try:
        poll_all([a], seen, lambda: len(seen.get(a, [])) >= 50)
        # b joins: a gives up half, b takes it; no partition is ever owned twice.
        poll_all([a, b], seen, lambda: len(partitions(a)) == len(partitions(b)) == 3)
        assert not partitions(a) & partitions(b)
        produce(servers, topic, range(300, 400))
        poll_all([a, b], seen, lambda: set().union(*seen.values()) >= set(range(400)))
        a.close()
        poll_all([b], seen, lambda: len(partitions(b)) == 6)
        produce(servers, topic, range(400, 450))
        poll_all([b], seen, lambda: set(seen[b]) >= set(range(400, 450)))
        b.commit(asynchronous=False)
    finally:
        close(a, b)
    # The offsets were committed with member epochs: a new member resumes after
    # them and reads nothing again.
    c = consumer(servers, "g1", topic)
    try:
        poll_all([c], {}, lambda: len(partitions(c)) == 6)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            msg = c.poll(0.1)
            assert msg is None or msg.error() is not None, f"read again: {msg.value()!r}"
    finally:
        close(c)


def test_admin_lists_and_describes_consumer_groups(broker: RunningBroker) -> None:
    servers, topic = broker.bootstrap_servers, "kip848-admin"
    create(servers, topic, 2)
    produce(servers, topic, range(10))
    c = consumer(servers, "g2", topic, **{"client.id": "described"})
    try:
        seen: dict[Consumer, list[int]] = {}
        poll_all([c], seen, lambda: len(seen.get(c, [])) == 10)
        admin = AdminClient({"bootstrap.servers": servers})
        listed = admin.list_consumer_groups().result(30).valid
        mine = [g for g in listed if g.group_id == "g2"]
        assert len(mine) == 1 and mine[0].type == ConsumerGroupType.CONSUMER
        described = admin.describe_consumer_groups(["g2"])["g2"].result(30)
        assert [m.client_id for m in described.members] == ["described"]
        assigned = {tp.partition for tp in described.members[0].assignment.topic_partitions}
        assert assigned == {0, 1}
        # trafka's admin sees the group's type too, and describes it (through
        # ConsumerGroupDescribe: DescribeGroups knows only classic groups).
        listings, desc = anyio.run(trafka_groups, servers, backend="trio")
        assert [(g.group_type, g.state) for g in listings if g.group_id == "g2"] == [
            ("consumer", "Stable")
        ]
        assert (desc.group_type, desc.state, desc.protocol) == ("consumer", "Stable", "uniform")
        assert [(m.client_id, sorted(m.assignment)) for m in desc.members] == [
            ("described", [(topic, 0), (topic, 1)])
        ]
        shown = CliRunner().invoke(main, ["groups", "describe", "g2", "-b", servers, "--json"])
        assert shown.exit_code == 0, shown.output
        rows = json.loads(shown.output)[0]["partitions"]
        assert {(r["partition"], r["client_id"]) for r in rows} == {
            (0, "described"),
            (1, "described"),
        }
    finally:
        close(c)


def test_classic_and_consumer_members_do_not_mix(broker: RunningBroker) -> None:
    servers, topic = broker.bootstrap_servers, "kip848-mix"
    create(servers, topic, 1)
    produce(servers, topic, range(5))
    new = consumer(servers, "g3", topic)
    classic = Consumer(
        {"bootstrap.servers": servers, "group.id": "g3", "auto.offset.reset": "earliest"}
    )
    try:
        seen: dict[Consumer, list[int]] = {}
        poll_all([new], seen, lambda: len(seen.get(new, [])) == 5)
        classic.subscribe([topic])
        deadline = time.monotonic() + 10
        error = None
        while error is None and time.monotonic() < deadline:
            msg = classic.poll(0.2)
            if msg is not None and msg.error() is not None:
                error = msg.error()
        assert error is not None and "INCONSISTENT_GROUP_PROTOCOL" in error.name()
    finally:
        close(new, classic)


def test_a_static_member_returning_gets_its_partitions_back(broker: RunningBroker) -> None:
    """librdkafka with ``group.instance.id`` leaves with epoch -2 on close; a
    new consumer with the same instance id takes over exactly its partitions,
    and the other member is not given them in between."""
    servers, topic = broker.bootstrap_servers, "kip848-static-rdk"
    create(servers, topic, 2)
    produce(servers, topic, range(20))
    one = consumer(servers, "static", topic, **{"group.instance.id": "one"})
    two = consumer(servers, "static", topic, **{"group.instance.id": "two"})
    opened = [one, two]
    seen: dict[Consumer, list[int]] = {}

    def parts(c: Consumer) -> set[int]:
        return {tp.partition for tp in c.assignment()}

    try:
        poll_all([one, two], seen, lambda: bool(parts(one) and parts(two)))
        theirs, mine = parts(one), parts(two)
        assert theirs | mine == {0, 1} and not (theirs & mine)
        one.close()
        opened.remove(one)
        deadline = time.monotonic() + 1.5  # five heartbeats of "two"
        while time.monotonic() < deadline:
            two.poll(0.05)
        assert parts(two) == mine
        back = consumer(servers, "static", topic, **{"group.instance.id": "one"})
        opened.append(back)
        poll_all([back, two], seen, lambda: parts(back) == theirs, timeout=20)
        assert parts(two) == mine
    finally:
        for c in opened:
            c.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_members_carry_on_across_a_broker_restart(tmp_path: Path) -> None:
    """The group is in the broker's journal: after a restart (same address, same
    data) librdkafka's members go on heartbeating as before: same member ids, no
    partition lost or revoked, and they keep consuming."""
    port = _free_port()
    settings: dict[str, Any] = {
        "port": port,
        "host": "127.0.0.1",
        "data_dir": tmp_path / "data",
        "group_initial_rebalance_delay_ms": 0,
        "group_consumer_min_heartbeat_interval_ms": 300,
        "group_consumer_heartbeat_interval_ms": 300,
        "group_consumer_min_session_timeout_ms": 6_000,
        "group_consumer_session_timeout_ms": 6_000,
    }
    servers, topic = f"127.0.0.1:{port}", "kip848-restart"
    events: list[tuple[str, set[int]]] = []

    def on(kind: str) -> Any:
        return lambda c, tps: events.append((kind, {tp.partition for tp in tps}))

    callbacks = {"on_assign": on("assign"), "on_revoke": on("revoke"), "on_lost": on("lost")}

    def member(name: str) -> Consumer:
        c = consumer(servers, "g-restart", topic, **{"client.id": name})
        c.subscribe([topic], **callbacks)
        return c

    seen: dict[Consumer, list[int]] = {}
    a = b = None
    try:
        with broker_in_thread(**settings):
            create(servers, topic, 4)
            produce(servers, topic, range(100))
            a, b = member("a"), member("b")
            poll_all(
                [a, b],
                seen,
                lambda: (
                    partitions(a) | partitions(b) == {0, 1, 2, 3}
                    and len(partitions(a)) == 2 == len(partitions(b))
                    and len(set().union(*seen.values())) == 100
                ),
            )
            before = _describe(servers)
            events.clear()
        # The broker is down; the members keep polling (and retrying) meanwhile.
        for _ in range(10):
            a.poll(0.05)
            b.poll(0.05)
        with broker_in_thread(**settings):
            produce(servers, topic, range(100, 200))
            poll_all([a, b], seen, lambda: len(set().union(*seen.values())) == 200)
            # A few heartbeats later, the group is as it was.
            for _ in range(20):
                a.poll(0.05)
                b.poll(0.05)
            after = _describe(servers)
            assert after == before
            assert events == [], "the restart caused a rebalance"
    finally:
        close(*(c for c in (a, b) if c is not None))


def _describe(servers: str) -> dict[str, set[int]]:
    """member id -> assigned partitions, from confluent-kafka's admin."""
    admin = AdminClient({"bootstrap.servers": servers})
    group = admin.describe_consumer_groups(["g-restart"])["g-restart"].result(30)
    assert group.type == ConsumerGroupType.CONSUMER
    return {
        m.member_id: {tp.partition for tp in m.assignment.topic_partitions} for m in group.members
    }
