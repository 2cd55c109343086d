"""Admin.remove_members_from_consumer_group against a real brokerlite, as Java's
``removeMembersFromConsumerGroup``: static members (trafka's and kafka-python's
consumers with ``group_instance_id``, which send no LeaveGroup when they close)
removed by instance id, the group rebalancing their partitions to the others; an
unknown instance id failing for itself only; removeAll; an unknown group; the
blocking Admin; and groups of the consumer protocol (KIP-848), where Kafka fences
the member named (brokerlite did not: its LeaveGroup knew classic groups only).

The consumers' session timeouts are minutes long, so a partition moving to the
others within a test can only be the removal's doing."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from sdk_brokers import fresh, module_broker
from sdk_fakebroker import FakeBroker

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.groups.consumer_groups import ConsumerGroups, TopicMeta
from trafka.brokerlite.groups.coordinator import GroupCoordinator
from trafka.brokerlite.groups.offsets import OffsetStore
from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k13_leave_group as lvg
from trafka.codec.messages import k68_consumer_group_heartbeat as hb
from trafka.sdk import NewTopic, open_admin, open_consumer
from trafka.sdk.admin import DEFAULT_LEAVE_GROUP_REASON
from trafka.sdk.blocking import Admin as BlockingAdmin

pytestmark = pytest.mark.timeout(120)

LONG_SESSION_MS = 120_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(
        tmp_path_factory,
        "admin-members",
        group_consumer_min_heartbeat_interval_ms=200,
        group_consumer_heartbeat_interval_ms=200,
        group_consumer_session_timeout_ms=LONG_SESSION_MS,
        group_consumer_max_session_timeout_ms=LONG_SESSION_MS,
    )


def classic(servers: str, group: str, instance: str | None) -> dict[str, Any]:
    return {
        "bootstrap_servers": servers,
        "group_id": group,
        "group_instance_id": instance,
        "session_timeout_ms": LONG_SESSION_MS,
        "heartbeat_interval_ms": 100,
        "auto_offset_reset": "earliest",
        "fetch_max_wait_ms": 50,  # a close waits for the fetch held at the end
    }


def kip848(servers: str, group: str, instance: str | None) -> dict[str, Any]:
    return {
        "bootstrap_servers": servers,
        "group_id": group,
        "group_instance_id": instance,
        "group_protocol": "consumer",
        "auto_offset_reset": "earliest",
        "fetch_max_wait_ms": 50,
    }


def owned(consumer: Any) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


async def poll_until(consumers: list[Any], done: Callable[[], bool], timeout: float = 30) -> None:
    """Poll every consumer (group progress needs polls) until ``done()``."""
    with anyio.fail_after(timeout):
        while not done():
            for c in consumers:
                await c.getmany(timeout_ms=20)


async def topic_with(servers: str, partitions: int) -> str:
    topic = fresh("members")
    async with open_admin(bootstrap_servers=servers) as admin:
        await admin.create_topics([NewTopic(topic, partitions)])
    return topic


async def instance_ids(servers: str, group: str) -> set[str | None]:
    async with open_admin(bootstrap_servers=servers) as admin:
        desc = (await admin.describe_groups([group]))[group]
    return {m.group_instance_id for m in desc.members}


def error_code(result: KafkaError | None) -> ErrorCode | None:
    return None if result is None else ErrorCode(result.code)


# -- classic groups ------------------------------------------------------------------------


def test_removed_static_member_partitions_go_to_the_others(broker: RunningBroker) -> None:
    servers, group = broker.bootstrap_servers, fresh("g")

    async def main() -> None:
        topic = await topic_with(servers, 6)
        async with (
            open_consumer(topic, **classic(servers, group, "a")) as a,
            open_consumer(topic, **classic(servers, group, "b")) as b,
        ):
            async with open_consumer(topic, **classic(servers, group, "c")) as c:
                await poll_until(
                    [a, b, c],
                    lambda: len(owned(a)) == len(owned(b)) == len(owned(c)) == 2,
                )
                gone = owned(c)
            # c closed without a LeaveGroup (static): the group keeps it and its
            # partitions until its session times out.
            assert await instance_ids(servers, group) == {"a", "b", "c"}
            assert not (owned(a) | owned(b)) & gone

            async with open_admin(bootstrap_servers=servers) as admin:
                result = await admin.remove_members_from_consumer_group(group, ["c", "nobody"])
            assert list(result) == ["c", "nobody"]
            assert result["c"] is None
            assert error_code(result["nobody"]) == ErrorCode.UNKNOWN_MEMBER_ID
            assert "nobody" in str(result["nobody"])

            await poll_until([a, b], lambda: owned(a) | owned(b) == set(range(6)))
            assert not owned(a) & owned(b)
            assert await instance_ids(servers, group) == {"a", "b"}

    anyio.run(main, backend="trio")


def test_kafka_python_static_member_removed(broker: RunningBroker) -> None:
    from kafka import KafkaConsumer

    servers, group = broker.bootstrap_servers, fresh("g")

    async def main() -> None:
        topic = await topic_with(servers, 4)
        kp = KafkaConsumer(
            bootstrap_servers=servers,
            group_id=group,
            group_instance_id="kp-1",
            session_timeout_ms=LONG_SESSION_MS,
            heartbeat_interval_ms=100,
            auto_offset_reset="earliest",
        )
        try:
            # kafka-python's leader assigns only the partitions its metadata knows:
            # let it see the new topic's before it joins.
            with anyio.fail_after(30):
                while not await anyio.to_thread.run_sync(kp.partitions_for_topic, topic):
                    await anyio.sleep(0.05)
            kp.subscribe([topic])
            async with open_consumer(topic, **classic(servers, group, "trafka-1")) as t:
                stop = anyio.Event()

                async def poll_kp() -> None:
                    while not stop.is_set():
                        await anyio.to_thread.run_sync(kp.poll, 50)

                async def poll_t() -> None:
                    await poll_until([t], lambda: len(owned(t)) == 2 and len(kp.assignment()) == 2)
                    stop.set()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(poll_kp)
                    tg.start_soon(poll_t)
                assert await instance_ids(servers, group) == {"kp-1", "trafka-1"}
                # kafka-python's static member closes without a LeaveGroup, too.
                await anyio.to_thread.run_sync(kp.close)
                assert await instance_ids(servers, group) == {"kp-1", "trafka-1"}
                async with open_admin(bootstrap_servers=servers) as admin:
                    result = await admin.remove_members_from_consumer_group(
                        group, ["kp-1"], reason="decommissioned"
                    )
                assert result == {"kp-1": None}
                await poll_until([t], lambda: owned(t) == set(range(4)))
                assert await instance_ids(servers, group) == {"trafka-1"}
        finally:
            kp.close()

    anyio.run(main, backend="trio")


def test_remove_all_empties_the_group(broker: RunningBroker) -> None:
    servers, group = broker.bootstrap_servers, fresh("g")

    async def main() -> None:
        topic = await topic_with(servers, 2)
        async with (
            open_consumer(topic, **classic(servers, group, "x")) as x,
            open_consumer(topic, **classic(servers, group, "y")) as y,
        ):
            await poll_until([x, y], lambda: len(owned(x)) == len(owned(y)) == 1)
        assert await instance_ids(servers, group) == {"x", "y"}
        async with open_admin(bootstrap_servers=servers) as admin:
            result = await admin.remove_members_from_consumer_group(group)
            assert result == {"x": None, "y": None}
            desc = (await admin.describe_groups([group]))[group]
            assert desc.state == "Empty" and desc.members == ()
            # Nothing left to remove: nothing is sent, nothing fails.
            assert await admin.remove_members_from_consumer_group(group) == {}

    anyio.run(main, backend="trio")


def test_remove_all_names_a_dynamic_member_by_member_id(broker: RunningBroker) -> None:
    """A dynamic member still running is removed by its member id; it finds out at
    its next heartbeat and joins again, under a new member id."""
    servers, group = broker.bootstrap_servers, fresh("g")

    async def main() -> None:
        topic = await topic_with(servers, 2)
        async with open_consumer(topic, **classic(servers, group, None)) as d:
            await poll_until([d], lambda: owned(d) == {0, 1})
            async with open_admin(bootstrap_servers=servers) as admin:
                [before] = (await admin.describe_groups([group]))[group].members
                assert before.group_instance_id is None
                result = await admin.remove_members_from_consumer_group(group)
                assert result == {before.member_id: None}

                async def rejoined() -> bool:
                    desc = (await admin.describe_groups([group]))[group]
                    ids = [m.member_id for m in desc.members]
                    return desc.state == "Stable" and len(ids) == 1 and ids != [before.member_id]

                with anyio.fail_after(30):
                    while not await rejoined():
                        await d.getmany(timeout_ms=20)
            await poll_until([d], lambda: owned(d) == {0, 1})

    anyio.run(main, backend="trio")


def test_unknown_group_and_bad_arguments(broker: RunningBroker) -> None:
    servers, group = broker.bootstrap_servers, fresh("no-such-group")

    async def main() -> None:
        async with open_admin(bootstrap_servers=servers) as admin:
            # Kafka answers UNKNOWN_MEMBER_ID for every member of a group it lacks.
            result = await admin.remove_members_from_consumer_group(group, ["i1", "i2"])
            assert {k: error_code(v) for k, v in result.items()} == {
                "i1": ErrorCode.UNKNOWN_MEMBER_ID,
                "i2": ErrorCode.UNKNOWN_MEMBER_ID,
            }
            # removeAll describes it first: there is no such group.
            with pytest.raises(KafkaError) as err:
                await admin.remove_members_from_consumer_group(group)
            assert err.value.code == ErrorCode.GROUP_ID_NOT_FOUND
            with pytest.raises(ValueError, match="empty"):
                await admin.remove_members_from_consumer_group(group, [])
            with pytest.raises(TypeError, match="not one string"):
                await admin.remove_members_from_consumer_group(group, "i1")

    anyio.run(main, backend="trio")


def test_blocking_admin_removes_a_static_member(broker: RunningBroker) -> None:
    servers, group = broker.bootstrap_servers, fresh("g")

    async def join_and_close() -> None:
        topic = await topic_with(servers, 1)
        async with open_consumer(topic, **classic(servers, group, "blocking-1")) as c:
            await poll_until([c], lambda: owned(c) == {0})

    anyio.run(join_and_close, backend="trio")
    with BlockingAdmin(bootstrap_servers=servers) as admin:
        assert [m.group_instance_id for m in admin.describe_groups([group])[group].members] == [
            "blocking-1"
        ]
        result = admin.remove_members_from_consumer_group(group, ["blocking-1", "other"])
        assert result["blocking-1"] is None
        assert error_code(result["other"]) == ErrorCode.UNKNOWN_MEMBER_ID
        assert admin.describe_groups([group])[group].members == ()


# -- consumer groups (KIP-848) -------------------------------------------------------------


def test_consumer_protocol_static_member_removed(broker: RunningBroker) -> None:
    """A static member of a consumer group that closes leaves with epoch -2 and
    keeps its partitions (no one else gets them) until it comes back or its
    session times out; removing it by instance id fences it at once, as Kafka's
    coordinator does, and the others take its partitions."""
    servers, group = broker.bootstrap_servers, fresh("g848")

    async def main() -> None:
        topic = await topic_with(servers, 4)
        lost: list[set[int]] = []

        class Listener:
            async def on_partitions_revoked(self, tps: Any) -> None:
                pass

            async def on_partitions_assigned(self, tps: Any) -> None:
                pass

            async def on_partitions_lost(self, tps: Any) -> None:
                lost.append({tp.partition for tp in tps})

        async with open_consumer(**kip848(servers, group, "p")) as p:
            p.subscribe([topic], listener=Listener())
            async with open_consumer(topic, **kip848(servers, group, "q")) as q:
                await poll_until([p, q], lambda: len(owned(p)) == len(owned(q)) == 2)
            async with open_admin(bootstrap_servers=servers) as admin:
                desc = (await admin.describe_groups([group]))[group]
                assert desc.group_type == "consumer"
                assert {m.group_instance_id for m in desc.members} == {"p", "q"}
                result = await admin.remove_members_from_consumer_group(group, ["q", "r"])
                assert result["q"] is None
                assert error_code(result["r"]) == ErrorCode.UNKNOWN_MEMBER_ID
                await poll_until([p], lambda: owned(p) == set(range(4)))
                desc = (await admin.describe_groups([group]))[group]
                assert [m.group_instance_id for m in desc.members] == ["p"]
                assert lost == []
                # removeAll describes the group through ConsumerGroupDescribe; p,
                # still running, is fenced (its partitions are lost) and joins again.
                assert await admin.remove_members_from_consumer_group(group) == {"p": None}
                await poll_until([p], lambda: lost == [set(range(4))])
                await poll_until([p], lambda: owned(p) == set(range(4)))
                desc = (await admin.describe_groups([group]))[group]
                assert [m.group_instance_id for m in desc.members] == ["p"]

    anyio.run(main, backend="trio")


ORDERS = uuid.UUID(int=7)


def _join(groups: ConsumerGroups, member_id: str, instance: str | None, now: int) -> Any:
    return groups.heartbeat(
        hb.ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id=member_id,
            member_epoch=0,
            instance_id=instance,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=["orders"],
            topic_partitions=[],
        ),
        0,
        now,
    )


def test_brokerlite_leave_group_fences_consumer_group_members(tmp_path: Path) -> None:
    """Sans-IO, what Kafka's classicGroupLeaveToConsumerGroup does: by instance id
    alone (an admin), by instance id with the holder's member id, by member id;
    FENCED_INSTANCE_ID for another member id; UNKNOWN_MEMBER_ID for nobody; one
    group epoch bump for the lot."""
    topics = {"orders": TopicMeta("orders", ORDERS, 6)}
    coordinator = GroupCoordinator(
        OffsetStore(tmp_path / "groups"),
        initial_rebalance_delay_ms=0,
        consumer_topics=lambda: topics,
        now_ms=1_000,
    )
    groups = coordinator.consumer
    a = _join(groups, "", "inst-a", 1_000).member_id
    b = _join(groups, "", "inst-b", 1_000).member_id
    c = _join(groups, "", None, 1_000).member_id
    d = _join(groups, "", "inst-d", 1_000).member_id
    epoch = groups.groups["g"].epoch

    request = lvg.LeaveGroupRequest(
        group_id="g",
        members=[
            lvg.LeaveGroupRequest.MemberIdentity(group_instance_id="inst-a"),
            lvg.LeaveGroupRequest.MemberIdentity(member_id=b, group_instance_id="inst-b"),
            lvg.LeaveGroupRequest.MemberIdentity(member_id=c),
            lvg.LeaveGroupRequest.MemberIdentity(member_id="someone", group_instance_id="inst-d"),
            lvg.LeaveGroupRequest.MemberIdentity(group_instance_id="inst-z"),
            lvg.LeaveGroupRequest.MemberIdentity(member_id="ghost"),
        ],
    )
    response, released = coordinator.leave_group(request, 5, 2_000)
    assert not released
    assert response.error_code == 0
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in response.members] == [
        ("", "inst-a", ErrorCode.NONE),
        (b, "inst-b", ErrorCode.NONE),
        (c, None, ErrorCode.NONE),
        ("someone", "inst-d", ErrorCode.FENCED_INSTANCE_ID),
        ("", "inst-z", ErrorCode.UNKNOWN_MEMBER_ID),
        ("ghost", None, ErrorCode.UNKNOWN_MEMBER_ID),
    ]
    group = groups.groups["g"]
    assert list(group.members) == [d]
    assert group.epoch == epoch + 1
    assert set(group.target) == {d}
    # The removed member's next heartbeat: UNKNOWN_MEMBER_ID (it must join again).
    again = groups.heartbeat(
        hb.ConsumerGroupHeartbeatRequest(group_id="g", member_id=a, member_epoch=1), 0, 3_000
    )
    assert again.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # A LeaveGroup before v3 (one member, its error at the top) reaches it too.
    old, _ = coordinator.leave_group(lvg.LeaveGroupRequest(group_id="g", member_id=d), 2, 4_000)
    assert old.error_code == ErrorCode.NONE and groups.groups["g"].members == {}


# -- the request and the retries, against a scripted broker ---------------------------------

QUICK = {"retry_backoff_ms": 5, "retry_backoff_max_ms": 20, "reconnect_backoff_ms": 5}


def script_leave_group(broker: FakeBroker, answers: list[Any]) -> list[Any]:
    """The fake broker as its own coordinator, answering LeaveGroups with ``answers``
    in turn (a top-level code, or a function of the request); the requests it got."""
    got: list[Any] = []

    def find(header: Any, body: Any) -> Any:
        R = fc.FindCoordinatorResponse
        return R(
            coordinators=[
                R.Coordinator(key=k, node_id=broker.node_id, host=broker.host, port=broker.port)
                for k in body.coordinator_keys
            ]
        )

    def leave(header: Any, body: Any) -> Any:
        got.append((header.request_api_version, body))
        answer = answers[min(len(got), len(answers)) - 1]
        if callable(answer):
            return answer(body)
        return lvg.LeaveGroupResponse(error_code=answer)

    broker.handlers[10] = find
    broker.handlers[13] = leave
    return got


def echo(body: Any) -> Any:
    R = lvg.LeaveGroupResponse
    return R(
        members=[
            R.MemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id)
            for m in body.members
        ]
    )


@pytest.mark.anyio
async def test_request_reason_and_coordinator_retries(fake_broker: FakeBroker) -> None:
    """LeaveGroup v5 with the members by instance id (member id empty) and Java's
    default reason; a loading, moved or missing coordinator is waited out."""
    got = script_leave_group(
        fake_broker,
        [
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ErrorCode.NOT_COORDINATOR,
            ErrorCode.COORDINATOR_NOT_AVAILABLE,
            echo,
        ],
    )
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        result = await admin.remove_members_from_consumer_group("g", ["i1", "i2", "i1"])
        assert result == {"i1": None, "i2": None}
        assert len(got) == 4
        version, body = got[-1]
        assert version == 5 and body.group_id == "g"
        assert [(m.member_id, m.group_instance_id, m.reason) for m in body.members] == [
            ("", "i1", DEFAULT_LEAVE_GROUP_REASON),
            ("", "i2", DEFAULT_LEAVE_GROUP_REASON),
        ]
        assert DEFAULT_LEAVE_GROUP_REASON == "member was removed by an admin"

        # A reason of one's own, cut to 255 characters as Java's maybeTruncateReason.
        got.clear()
        await admin.remove_members_from_consumer_group("g", ["i1"], reason="r" * 300)
        assert got[-1][1].members[0].reason == "r" * 255


@pytest.mark.anyio
async def test_group_errors_are_final_and_missing_answers_fail_per_member(
    fake_broker: FakeBroker,
) -> None:
    got = script_leave_group(fake_broker, [ErrorCode.GROUP_AUTHORIZATION_FAILED])
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        with pytest.raises(KafkaError) as err:
            await admin.remove_members_from_consumer_group("g", ["i1"])
        assert err.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert len(got) == 1  # not retried

        def half(body: Any) -> Any:
            R = lvg.LeaveGroupResponse
            first = body.members[0]
            return R(
                members=[
                    R.MemberResponse(
                        member_id=first.member_id,
                        group_instance_id=first.group_instance_id,
                        error_code=ErrorCode.FENCED_INSTANCE_ID,
                    )
                ]
            )

        script_leave_group(fake_broker, [half])
        result = await admin.remove_members_from_consumer_group("g", ["i1", "i2"])
        assert error_code(result["i1"]) == ErrorCode.FENCED_INSTANCE_ID
        assert error_code(result["i2"]) == ErrorCode.UNKNOWN_SERVER_ERROR
        assert "did not answer" in str(result["i2"])
