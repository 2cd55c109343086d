"""trafka's consumer with ``group.protocol=consumer`` (KIP-848) against brokerlite:
members split and hand over partitions, commits carry member epochs, a
librdkafka member (confluent-kafka) shares the group, a static member leaves
with epoch -2 and a new process with its instance id gets its partitions back,
a classic group of the same id is refused clearly, and group.version 0
(UpdateFeatures) turns the protocol off until it is raised back to 1."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from confluent_kafka import Consumer as CkConsumer

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.codec import ErrorCode, KafkaError
from trafka.sdk import (
    ConfigError,
    FeatureUpdate,
    UpgradeType,
    open_admin,
    open_consumer,
    open_producer,
)
from trafka.sdk.fetcher import TopicPartition

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with broker_in_thread(
        port=0,
        data_dir=tmp_path / "data",
        group_initial_rebalance_delay_ms=0,
        group_consumer_min_heartbeat_interval_ms=200,
        group_consumer_heartbeat_interval_ms=200,
        group_consumer_min_session_timeout_ms=6_000,
        group_consumer_session_timeout_ms=6_000,
    ) as running:
        yield running


def settings(servers: str, group: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap_servers": servers,
        "group_id": group,
        "group_protocol": "consumer",
        "auto_offset_reset": "earliest",
        "fetch_max_wait_ms": 50,  # a close waits for the fetch held at the end
        **extra,
    }


async def fill(servers: str, topic: str, values: range, partitions: int) -> None:
    async with open_admin(bootstrap_servers=servers) as admin:
        with contextlib.suppress(KafkaError):
            await admin.create_topics([topic], num_partitions=partitions)
    async with open_producer(bootstrap_servers=servers) as producer:
        for i in values:
            await producer.send(topic, b"%d" % i, key=b"k%d" % i)
        await producer.flush()


class Recorder:
    """A rebalance listener that records every call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, set[int]]] = []

    async def on_partitions_revoked(self, tps: set[TopicPartition]) -> None:
        self.calls.append(("revoked", {tp.partition for tp in tps}))

    async def on_partitions_assigned(self, tps: set[TopicPartition]) -> None:
        self.calls.append(("assigned", {tp.partition for tp in tps}))

    async def on_partitions_lost(self, tps: set[TopicPartition]) -> None:
        self.calls.append(("lost", {tp.partition for tp in tps}))


async def drain(consumer: Any, seen: list[int], until: Any, timeout: float = 30) -> None:
    with anyio.fail_after(timeout):
        while not until():
            batches = await consumer.getmany(timeout_ms=50)
            for records in batches.values():
                seen.extend(int(r.value) for r in records)


def owned(consumer: Any) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def test_members_split_hand_over_and_resume_from_commits(broker: RunningBroker) -> None:
    servers, topic = broker.bootstrap_servers, "kip848-sdk"

    async def main() -> None:
        await fill(servers, topic, range(300), 6)
        seen_a: list[int] = []
        seen_b: list[int] = []
        rec_a, rec_b = Recorder(), Recorder()
        async with open_consumer(**settings(servers, "g1")) as a:
            a.subscribe([topic], listener=rec_a)
            await drain(a, seen_a, lambda: len(seen_a) >= 100)
            assert owned(a) == set(range(6))
            async with open_consumer(**settings(servers, "g1")) as b:
                b.subscribe([topic], listener=rec_b)

                async def both() -> None:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(drain, a, seen_a, lambda: len(owned(b)) == 3)
                        tg.start_soon(drain, b, seen_b, lambda: len(owned(b)) == 3)

                await both()
                # The coordinator split the partitions; a gave up exactly what b took.
                assert len(owned(a)) == 3 and not owned(a) & owned(b)
                assert ("revoked", owned(b)) in rec_a.calls
                assert rec_b.calls[0] == ("assigned", owned(b))
                await fill(servers, topic, range(300, 400), 6)
                everything = set(range(400))

                async def rest() -> None:
                    def done() -> bool:
                        return set(seen_a) | set(seen_b) >= everything

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(drain, a, seen_a, done)
                        tg.start_soon(drain, b, seen_b, done)

                await rest()
                # No record was read twice: revoked partitions were committed first.
                assert len(seen_a) + len(seen_b) == len(set(seen_a) | set(seen_b)) == 400
                await a.commit()
                await b.commit()
            # b left (epoch -1): a gets its partitions back.
            await drain(a, seen_a, lambda: owned(a) == set(range(6)))
        # A new member resumes after the committed offsets: nothing more to read.
        async with open_consumer(**settings(servers, "g1")) as c:
            c.subscribe([topic])
            again: list[int] = []
            await drain(c, again, lambda: owned(c) == set(range(6)))
            with anyio.move_on_after(1.5):
                await drain(c, again, lambda: False)
            assert again == []

    anyio.run(main, backend="trio")


def test_a_trafka_member_and_a_librdkafka_member_share_a_group(broker: RunningBroker) -> None:
    servers, topic = broker.bootstrap_servers, "kip848-mixed"

    async def main() -> None:
        await fill(servers, topic, range(200), 4)
        other = CkConsumer(
            {
                "bootstrap.servers": servers,
                "group.id": "g2",
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
            }
        )
        other.subscribe([topic])
        theirs: list[int] = []
        mine: list[int] = []
        try:
            async with open_consumer(**settings(servers, "g2")) as c:
                c.subscribe([topic])
                deadline = time.monotonic() + 40
                while set(mine) | set(theirs) != set(range(200)) or not (
                    owned(c) and other.assignment()
                ):
                    assert time.monotonic() < deadline, (len(mine), len(theirs))
                    msg = other.poll(0.02)
                    if msg is not None and msg.error() is None:
                        theirs.append(int(msg.value()))
                    for records in (await c.getmany(timeout_ms=20)).values():
                        mine.extend(int(r.value) for r in records)
                theirs_now = {tp.partition for tp in other.assignment()}
                assert owned(c) | theirs_now == set(range(4))
                assert not owned(c) & theirs_now
                assert len(mine) + len(theirs) == 200
        finally:
            other.close()

    anyio.run(main, backend="trio")


def test_a_member_fenced_after_a_stall_loses_its_partitions_and_rejoins(tmp_path: Path) -> None:
    topic = "kip848-fenced"

    async def main(running: RunningBroker) -> None:
        servers = running.bootstrap_servers
        await fill(servers, topic, range(20), 2)
        seen: list[int] = []
        rec = Recorder()
        async with open_consumer(**settings(servers, "g3")) as c:
            c.subscribe([topic], listener=rec)
            await drain(c, seen, lambda: len(seen) == 20)
            member = c._group.machine.member_id
            assert rec.calls == [("assigned", {0, 1})]
            # The whole process stalls (no heartbeat) past the session timeout: the
            # coordinator fences the member. Its next heartbeat learns it, the
            # partitions are lost (not revoked: no commit), and it joins again as
            # itself, with epoch 0, and gets them back. (The broker fences on its
            # timer's tick, not on a late heartbeat: stall until it has, however
            # late that tick comes, rather than for a fixed time.)
            group = running.broker.groups.consumer.groups["g3"]
            deadline = time.monotonic() + 30
            while member in group.members:
                assert time.monotonic() < deadline, "the member was never fenced"
                time.sleep(0.05)
            with anyio.fail_after(20):
                while len(rec.calls) < 3:
                    await c.getmany(timeout_ms=50)
            assert rec.calls == [("assigned", {0, 1}), ("lost", {0, 1}), ("assigned", {0, 1})]
            assert c._group.machine.member_id == member
            assert owned(c) == {0, 1}

    with broker_in_thread(
        port=0,
        data_dir=tmp_path / "data",
        group_consumer_min_heartbeat_interval_ms=100,
        group_consumer_heartbeat_interval_ms=100,
        group_consumer_min_session_timeout_ms=2_000,
        group_consumer_session_timeout_ms=2_000,
    ) as running:
        anyio.run(main, running, backend="trio")


def test_a_classic_group_of_the_same_id_is_refused(broker: RunningBroker) -> None:
    servers, topic = broker.bootstrap_servers, "kip848-classic"

    async def main() -> None:
        await fill(servers, topic, range(5), 2)
        async with open_consumer(
            bootstrap_servers=servers, group_id="g4", auto_offset_reset="earliest"
        ) as classic:
            classic.subscribe([topic])
            await drain(classic, [], lambda: owned(classic) == {0, 1})
            async with open_consumer(**settings(servers, "g4")) as new:
                new.subscribe([topic])
                with anyio.fail_after(20), pytest.raises(KafkaError) as caught:
                    while True:
                        await new.getmany(timeout_ms=50)
                assert "GROUP_ID_NOT_FOUND" in str(caught.value), caught.value

    anyio.run(main, backend="trio")


def test_group_version_0_turns_the_protocol_off_and_1_back_on(broker: RunningBroker) -> None:
    """With group.version finalized at 0 (UpdateFeatures), a group.protocol=consumer
    member fails with UNSUPPORTED_VERSION, as against Kafka 4.x with the feature off
    (ConsumerGroupHeartbeat stays advertised and answers UNSUPPORTED_VERSION);
    raised back to 1, the same member joins."""
    servers, topic = broker.bootstrap_servers, "kip848-feature"

    async def main() -> None:
        await fill(servers, topic, range(10), 2)
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.update_features(
                {"group.version": FeatureUpdate(0, UpgradeType.SAFE_DOWNGRADE)}
            )
        async with open_consumer(**settings(servers, "g-feature")) as off:
            off.subscribe([topic])
            with anyio.fail_after(20), pytest.raises(KafkaError) as caught:
                while True:
                    await off.getmany(timeout_ms=50)
            assert caught.value.code == ErrorCode.UNSUPPORTED_VERSION, caught.value
            assert not owned(off)
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.update_features({"group.version": FeatureUpdate(1)})
        async with open_consumer(**settings(servers, "g-feature")) as on:
            on.subscribe([topic])
            seen: list[int] = []
            await drain(on, seen, lambda: len(seen) == 10)
            assert owned(on) == {0, 1} and sorted(seen) == list(range(10))

    anyio.run(main, backend="trio")


def test_a_static_member_leaves_with_epoch_minus_two(broker: RunningBroker) -> None:
    servers, topic = broker.bootstrap_servers, "kip848-static"
    sent: list[int] = []

    async def main() -> None:
        await fill(servers, topic, range(5), 1)
        async with open_consumer(**settings(servers, "g5", group_instance_id="i-1")) as c:
            c.subscribe([topic])
            await drain(c, [], lambda: owned(c) == {0})
            machine = c._group.machine
            leave = machine.leave
            machine.leave = lambda now, reason="closing": _recorded(leave(now, reason), sent)

    anyio.run(main, backend="trio")
    assert sent == [-2]


def test_a_static_member_that_comes_back_gets_its_partitions_back(broker: RunningBroker) -> None:
    """A static member closes (epoch -2) and a new process with its instance id
    takes over its partitions; meanwhile the other member is not given them."""
    servers, topic = broker.bootstrap_servers, "kip848-static-return"

    async def main() -> None:
        await fill(servers, topic, range(40), 2)
        async with open_consumer(**settings(servers, "g6", group_instance_id="stay")) as stay:
            stay.subscribe([topic])
            async with open_consumer(**settings(servers, "g6", group_instance_id="away")) as away:
                away.subscribe([topic])
                with anyio.fail_after(30):
                    while not (owned(stay) and owned(away)):
                        for c in (stay, away):
                            await c.getmany(timeout_ms=50)
                theirs, mine = owned(away), owned(stay)
                assert theirs | mine == {0, 1} and not (theirs & mine)
            # "away" left with -2; several heartbeats (200 ms apart) later, "stay"
            # still owns only its own partition.
            with anyio.move_on_after(1.5):
                while True:
                    await stay.getmany(timeout_ms=50)
            assert owned(stay) == mine
            async with open_consumer(**settings(servers, "g6", group_instance_id="away")) as back:
                back.subscribe([topic])
                with anyio.fail_after(15):
                    while owned(back) != theirs:
                        await back.getmany(timeout_ms=50)
                        await stay.getmany(timeout_ms=0)
                assert owned(stay) == mine

    anyio.run(main, backend="trio")


def test_a_member_closed_while_its_join_is_on_its_way_leaves_the_group(
    broker: RunningBroker,
) -> None:
    # The join heartbeat (epoch 0) has reached the coordinator but its answer is
    # held on the way back when close() starts: the leave waits for that answer (it
    # carries the epoch to leave with) and then takes the member out. Not waiting,
    # there is no epoch to leave with, and the member would stay in the group until
    # its session timed out.
    servers, topic = broker.bootstrap_servers, "kip848-close-joining"

    async def main() -> None:
        await fill(servers, topic, range(3), 1)
        async with open_consumer(**settings(servers, "g-closing")) as consumer:
            cluster = consumer.cluster
            plain = cluster.coordinator_connection
            held = anyio.Event()

            class SlowAnswer:
                def __init__(self, conn: Any) -> None:
                    self._conn = conn

                def __getattr__(self, name: str) -> Any:
                    return getattr(self._conn, name)

                async def request(self, key: int, body: Any, **kw: Any) -> Any:
                    answer = await self._conn.request(key, body, **kw)
                    if key == 68 and not held.is_set():
                        held.set()
                        await anyio.sleep(0.5)
                    return answer

            async def slow_answers(coordinator: Any) -> Any:
                return SlowAnswer(await plain(coordinator))

            cluster.coordinator_connection = slow_answers  # type: ignore[method-assign]
            consumer.subscribe([topic])
            with anyio.fail_after(10):
                while not held.is_set():
                    await consumer.getmany(timeout_ms=10)
        async with open_admin(bootstrap_servers=servers) as admin:
            group = (await admin.describe_groups(["g-closing"]))["g-closing"]
        assert group.group_type == "consumer" and group.members == ()

    anyio.run(main, backend="trio")


def _recorded(request: Any, sent: list[int]) -> Any:
    if request is not None:
        sent.append(request.build(1).member_epoch)
    return request


def test_settings_the_coordinator_owns_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"session\.timeout\.ms"):
        anyio.run(_open, {"group_protocol": "consumer", "session_timeout_ms": 10_000})
    with pytest.raises(ConfigError, match=r"partition\.assignment\.strategy"):
        anyio.run(_open, {"group_protocol": "consumer", "partition_assignment_strategy": "range"})
    with pytest.raises(ConfigError, match=r"group\.remote\.assignor"):
        anyio.run(_open, {"group_remote_assignor": "uniform"})
    with pytest.raises(ConfigError, match=r"group\.protocol"):
        anyio.run(_open, {"group_protocol": "modern"})


async def _open(extra: dict[str, Any]) -> None:
    async with open_consumer(bootstrap_servers="127.0.0.1:1", group_id="g", **extra):
        pass
