"""Admin calls: one deadline per call, and retries of what passes (as Kafka's AdminClient).

A scripted broker (:mod:`sdk_fakebroker`) answers with an error first and
properly after, and the tests check what the call did in between: which
requests went out again (only the items still open), that metadata was
refreshed for a moved leader or controller, and that errors which are
answers are raised at once. Further down: a broker that never answers and a
port nobody listens on end at the call's deadline with ApiTimeoutError, and
brokerlite behind the fault proxy shows the same against the real broker.
"""

from __future__ import annotations

import itertools
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from sdk_fakebroker import FakeBroker

from trafka.codec import ErrorCode, KafkaError, api
from trafka.codec.messages import k08_offset_commit as oc
from trafka.codec.messages import k09_offset_fetch as of
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k15_describe_groups as dg
from trafka.codec.messages import k19_create_topics as ct
from trafka.codec.messages import k20_delete_topics as dt
from trafka.codec.messages import k22_init_producer_id as ipid
from trafka.codec.messages import k32_describe_configs as dc
from trafka.codec.messages import k37_create_partitions as cp
from trafka.codec.messages import k42_delete_groups as dgr
from trafka.codec.messages import k65_describe_transactions as dtx
from trafka.codec.protocol import decode_response, encode_response
from trafka.sdk import NewTopic, TopicPartition, open_admin
from trafka.sdk.errors import ApiTimeoutError, NoBrokersAvailableError

pytestmark = pytest.mark.anyio

QUICK = {"retry_backoff_ms": 5, "retry_backoff_max_ms": 20, "reconnect_backoff_ms": 5}

NOT_CONTROLLER = ErrorCode.NOT_CONTROLLER
LOADING = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def sent(broker: FakeBroker, key: int) -> list[Any]:
    """The bodies of the requests of one API the broker received, in order."""
    return [body for k, _, body in broker.requests if k == key]


def codes(*first: Any) -> Iterator[Any]:
    """The error codes (or per-name code maps) of successive answers: ``first``, then 0 forever."""
    return itertools.chain(first, itertools.repeat(0))


def coordinator(broker: FakeBroker, errors: Iterator[int] | None = None) -> None:
    """Serve FindCoordinator: the fake broker itself, after ``errors``."""
    errors = errors or codes()

    def find(header: Any, body: Any) -> Any:
        code = next(errors)
        node, host, port = (-1, "", -1) if code else (broker.node_id, broker.host, broker.port)
        R = fc.FindCoordinatorResponse
        if header.request_api_version >= 4:
            return R(
                coordinators=[
                    R.Coordinator(key=k, node_id=node, host=host, port=port, error_code=code)
                    for k in body.coordinator_keys
                ]
            )
        return R(error_code=code, node_id=node, host=host, port=port)

    broker.handlers[10] = find


def advertise(broker: FakeBroker, key: int) -> None:
    """Make the broker list ``key`` in ApiVersions (it lists the client's usual APIs)."""
    base = broker.api_versions

    def versions(header: Any, body: Any) -> Any:
        answer = base(header, body)
        if all(k.api_key != key for k in answer.api_keys):
            info = api(key)
            answer.api_keys.append(
                type(answer.api_keys[0])(
                    api_key=key, min_version=info.min_version, max_version=info.max_version
                )
            )
        return answer

    broker.handlers[18] = versions


# -- topics: only what the broker did not do is sent again -----------------------------------


def _topic_results(key: int, names: list[str], code_of: Callable[[str], int]) -> Any:
    if key == 19:
        R19 = ct.CreateTopicsResponse
        return R19(topics=[R19.CreatableTopicResult(name=n, error_code=code_of(n)) for n in names])
    if key == 20:
        R20 = dt.DeleteTopicsResponse
        return R20(
            responses=[R20.DeletableTopicResult(name=n, error_code=code_of(n)) for n in names]
        )
    R37 = cp.CreatePartitionsResponse
    return R37(
        results=[R37.CreatePartitionsTopicResult(name=n, error_code=code_of(n)) for n in names]
    )


def _names(key: int, body: Any) -> list[str]:
    if key == 20:
        return [t.name for t in body.topics] if body.topics else list(body.topic_names)
    return [t.name for t in body.topics]


OPERATIONS: dict[str, tuple[int, Callable[[Any, list[str]], Any]]] = {
    "create_topics": (19, lambda a, names: a.create_topics([NewTopic(n, 1) for n in names])),
    "delete_topics": (20, lambda a, names: a.delete_topics(names)),
    "create_partitions": (37, lambda a, names: a.create_partitions({n: 4 for n in names})),
}


def script_topics(broker: FakeBroker, key: int, answers: Iterator[dict[str, int]]) -> None:
    def handle(header: Any, body: Any) -> Any:
        plan = next(answers)
        names = _names(key, body)
        return _topic_results(key, names, lambda n: plan.get(n, 0) if plan else 0)

    broker.handlers[key] = handle


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize("code", [NOT_CONTROLLER, ErrorCode.THROTTLING_QUOTA_EXCEEDED])
async def test_a_topic_the_broker_did_nothing_with_is_sent_again_alone(
    fake_broker: FakeBroker, operation: str, code: ErrorCode
) -> None:
    key, call = OPERATIONS[operation]
    script_topics(fake_broker, key, codes({"a": code}, {"a": code}))
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        with anyio.fail_after(10):
            await call(admin, ["a", "b"])
    assert [_names(key, body) for body in sent(fake_broker, key)] == [["a", "b"], ["a"], ["a"]]
    if code == NOT_CONTROLLER:
        # The controller moved: metadata is asked again before each retry.
        keys = [k for k, _, _ in fake_broker.requests if k in (3, key)]
        assert keys[-5:] == [key, 3, key, 3, key]


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
async def test_a_topic_level_error_is_an_answer_not_retried(
    fake_broker: FakeBroker, operation: str
) -> None:
    """REQUEST_TIMED_OUT is retriable in Kafka's table, but for a topic it means
    the controller may still finish: Kafka's AdminClient raises it, so do we.
    The other topic's retry goes on, and the first failure in the caller's
    order is raised."""
    key, call = OPERATIONS[operation]
    timed_out = ErrorCode.REQUEST_TIMED_OUT
    script_topics(fake_broker, key, codes({"a": NOT_CONTROLLER, "b": timed_out}))
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        with anyio.fail_after(10), pytest.raises(KafkaError) as caught:
            await call(admin, ["a", "b", "c"])
    assert caught.value.code == timed_out and "'b'" in str(caught.value)
    assert [_names(key, body) for body in sent(fake_broker, key)] == [["a", "b", "c"], ["a"]]


async def test_the_deadline_ends_retries_with_the_last_error_as_cause(
    fake_broker: FakeBroker,
) -> None:
    script_topics(fake_broker, 19, itertools.repeat({"a": NOT_CONTROLLER}))
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        with anyio.fail_after(10), pytest.raises(ApiTimeoutError) as caught:
            await admin.create_topics(["a"], num_partitions=1, timeout_ms=300)
    error = caught.value
    assert isinstance(error, TimeoutError)
    assert "create_topics" in str(error) and "300 ms" in str(error)
    assert isinstance(error.__cause__, KafkaError) and error.__cause__.code == NOT_CONTROLLER
    requests = sent(fake_broker, 19)
    assert len(requests) >= 2
    # The controller is told what is left of the call's bound, never more.
    assert all(0 <= body.timeout_ms <= 300 for body in requests)
    assert requests[-1].timeout_ms < requests[0].timeout_ms


# -- coordinators: found again while they move or load ---------------------------------------


def _describe_groups(errors: Iterator[int]) -> Callable[[Any, Any], Any]:
    def handle(header: Any, body: Any) -> Any:
        R = dg.DescribeGroupsResponse
        code = next(errors)
        return R(
            groups=[
                R.DescribedGroup(
                    error_code=code,
                    group_id=g,
                    group_state="Empty" if not code else "",
                    protocol_type="consumer" if not code else "",
                )
                for g in body.groups
            ]
        )

    return handle


async def test_describe_groups_waits_out_a_moving_and_loading_coordinator(
    fake_broker: FakeBroker,
) -> None:
    coordinator(fake_broker, codes(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    fake_broker.handlers[15] = _describe_groups(codes(LOADING, ErrorCode.NOT_COORDINATOR))
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        with anyio.fail_after(10):
            groups = await admin.describe_groups(["g1", "g2"])
    assert {g: d.state for g, d in groups.items()} == {"g1": "Empty", "g2": "Empty"}
    # g1: the coordinator was not there, then loading, then moved; g2 once.
    assert len(sent(fake_broker, 10)) == 5
    assert [body.groups for body in sent(fake_broker, 15)] == [["g1"], ["g1"], ["g1"], ["g2"]]


async def test_a_group_error_that_is_an_answer_is_raised_at_once(fake_broker: FakeBroker) -> None:
    coordinator(fake_broker)
    fake_broker.handlers[15] = _describe_groups(codes(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        with anyio.fail_after(10), pytest.raises(KafkaError) as caught:
            await admin.describe_groups(["g1"])
    assert caught.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert len(sent(fake_broker, 15)) == 1


def _coordinator_calls() -> dict[str, tuple[int, Callable[[Iterator[int]], Any], Any]]:
    """Coordinator-routed calls: (API key, handler answering with successive codes, call)."""

    def delete_groups(errors: Iterator[int]) -> Any:
        def handle(header: Any, body: Any) -> Any:
            R = dgr.DeleteGroupsResponse
            code = next(errors)
            return R(
                results=[
                    R.DeletableGroupResult(group_id=g, error_code=code) for g in body.groups_names
                ]
            )

        return handle

    def offset_fetch(errors: Iterator[int]) -> Any:
        def handle(header: Any, body: Any) -> Any:
            R = of.OffsetFetchResponse
            code = next(errors)
            if header.request_api_version >= 8:
                group = R.OffsetFetchResponseGroup(
                    group_id=body.groups[0].group_id,
                    error_code=code,
                    topics=[
                        R.OffsetFetchResponseTopics(
                            name="t",
                            partitions=[
                                R.OffsetFetchResponsePartitions(
                                    partition_index=0, committed_offset=7
                                )
                            ],
                        )
                    ],
                )
                return R(groups=[group])
            return R(
                error_code=code,
                topics=[
                    R.OffsetFetchResponseTopic(
                        name="t",
                        partitions=[
                            R.OffsetFetchResponsePartition(partition_index=0, committed_offset=7)
                        ],
                    )
                ],
            )

        return handle

    def offset_commit(errors: Iterator[int]) -> Any:
        def handle(header: Any, body: Any) -> Any:
            R = oc.OffsetCommitResponse
            code = next(errors)
            return R(
                topics=[
                    R.OffsetCommitResponseTopic(
                        name=t.name,
                        partitions=[
                            R.OffsetCommitResponsePartition(
                                partition_index=p.partition_index, error_code=code
                            )
                            for p in t.partitions
                        ],
                    )
                    for t in body.topics
                ]
            )

        return handle

    def describe_txn(errors: Iterator[int]) -> Any:
        def handle(header: Any, body: Any) -> Any:
            R = dtx.DescribeTransactionsResponse
            code = next(errors)
            return R(
                transaction_states=[
                    R.TransactionState(
                        error_code=code,
                        transactional_id=t,
                        transaction_state="Empty",
                        producer_id=5,
                        producer_epoch=1,
                        transaction_timeout_ms=60000,
                        transaction_start_time_ms=-1,
                    )
                    for t in body.transactional_ids
                ]
            )

        return handle

    def init_pid(errors: Iterator[int]) -> Any:
        def handle(header: Any, body: Any) -> Any:
            code = next(errors)
            return ipid.InitProducerIdResponse(
                error_code=code, producer_id=-1 if code else 5, producer_epoch=1
            )

        return handle

    tp = TopicPartition("t", 0)
    return {
        "delete_groups": (42, delete_groups, lambda a: a.delete_groups(["g"])),
        "list_consumer_group_offsets": (
            9,
            offset_fetch,
            lambda a: a.list_consumer_group_offsets("g", [tp]),
        ),
        "alter_consumer_group_offsets": (
            8,
            offset_commit,
            lambda a: a.alter_consumer_group_offsets("g", {tp: 3}),
        ),
        "describe_transactions": (65, describe_txn, lambda a: a.describe_transactions(["tx"])),
        "fence_producers": (22, init_pid, lambda a: a.fence_producers(["tx"])),
    }


COORDINATOR_CALLS = _coordinator_calls()


@pytest.mark.parametrize("call", sorted(COORDINATOR_CALLS))
async def test_coordinator_calls_retry_loading_and_moved_coordinators(
    fake_broker: FakeBroker, call: str
) -> None:
    key, handler, run = COORDINATOR_CALLS[call]
    coordinator(fake_broker)
    advertise(fake_broker, key)
    fake_broker.handlers[key] = handler(codes(LOADING, ErrorCode.NOT_COORDINATOR))
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        with anyio.fail_after(10):
            result = await run(admin)
    if call == "list_consumer_group_offsets":
        assert result == {TopicPartition("t", 0): 7}
    assert len(sent(fake_broker, key)) == 3
    assert len(sent(fake_broker, 10)) == 3  # the coordinator is looked up for each attempt


# -- partition leaders: only the partitions a leader refused are asked again -----------------


def refuse_partitions(broker: FakeBroker, rounds: Iterator[dict[int, int]]) -> None:
    """ListOffsets answers in which, answer after answer, the partitions of the
    next map of ``rounds`` fail with its code (and no offset)."""
    answer = broker.list_offsets

    def handle(header: Any, body: Any) -> Any:
        response = answer(header, body)
        errors = next(rounds, {})
        for t in response.topics:
            for p in t.partitions:
                if p.partition_index in errors:
                    # Answers are frozen: this is a test rewriting one on its way.
                    object.__setattr__(p, "error_code", errors[p.partition_index])
                    object.__setattr__(p, "offset", -1)
        return response

    broker.handlers[2] = handle


async def test_list_offsets_asks_again_only_for_the_partition_whose_leader_moved(
    fake_broker: FakeBroker,
) -> None:
    refuse_partitions(fake_broker, iter([{1: ErrorCode.NOT_LEADER_OR_FOLLOWER}]))
    fake_broker.next_offset[("t", 1)] = 9
    specs = {TopicPartition("t", p): "latest" for p in range(3)}
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        await admin.describe_topics(["t"])
        before = len(sent(fake_broker, 3))
        with anyio.fail_after(10):
            offsets = await admin.list_offsets(specs)
    assert {tp.partition: o for tp, o in offsets.items() if o} == {
        0: (0, -1),
        1: (9, -1),
        2: (0, -1),
    }
    asked = [
        sorted(p.partition_index for t in body.topics for p in t.partitions)
        for body in sent(fake_broker, 2)
    ]
    assert asked == [[0, 1, 2], [1]]
    assert len(sent(fake_broker, 3)) > before  # the leader was looked up again


async def test_a_partition_the_topic_does_not_have_is_an_error_after_a_few_lookups(
    fake_broker: FakeBroker,
) -> None:
    """A broker may answer Metadata from a view older than a CreatePartitions
    another broker took, so the partition is looked up again a few times (Kafka's
    admin client, PartitionLeaderStrategy.handleResponse, until the deadline);
    then it is UNKNOWN_TOPIC_OR_PARTITION, and no ListOffsets was sent."""
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        await admin.describe_topics(["t"])
        before = len(sent(fake_broker, 3))
        with anyio.fail_after(10), pytest.raises(KafkaError, match="no partition 7") as caught:
            await admin.list_offsets({TopicPartition("t", 7): "latest"})
    assert caught.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert len(sent(fake_broker, 3)) > before + 1  # looked up again, more than once
    assert not sent(fake_broker, 2)


async def test_a_partition_added_while_it_is_looked_up_is_answered(
    fake_broker: FakeBroker,
) -> None:
    """The other half: the topic grows at the second Metadata request after the
    call began; the partition is then asked."""
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        await admin.describe_topics(["t"])
        seen = [0]

        def grow(api_key: int) -> None:
            if api_key == 3:
                seen[0] += 1
                if seen[0] == 2:
                    fake_broker.topics["t"] = 8

        fake_broker.before = grow
        with anyio.fail_after(10):
            offsets = await admin.list_offsets({TopicPartition("t", 7): "latest"})
    assert offsets == {TopicPartition("t", 7): (0, -1)}
    assert seen[0] >= 2


async def test_a_dropped_connection_is_retried(fake_broker: FakeBroker) -> None:
    drops = iter(["close"])

    def handle(header: Any, body: Any) -> Any:
        if next(drops, None):
            return "close"
        R = dc.DescribeConfigsResponse
        return R(
            results=[
                R.DescribeConfigsResult(
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                    configs=[R.DescribeConfigsResourceResult(name="retention.ms", value="1")],
                )
                for r in body.resources
            ]
        )

    fake_broker.handlers[32] = handle
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        with anyio.fail_after(10):
            configs = await admin.describe_configs(topics=["t"])
    assert configs == {"t": {"retention.ms": "1"}}
    assert len(sent(fake_broker, 32)) == 2
    assert fake_broker.connections >= 2


# -- the deadline covers connecting too ------------------------------------------------------


async def test_a_broker_that_never_answers_ends_the_call_at_its_deadline() -> None:
    """The handshake hangs: request.timeout.ms (60 s) would not end it, the call's
    300 ms do. The connect is the client's, not the call's: it goes on after the
    call gave up, and socket.connection.setup.timeout.ms (1 s here), which bounds
    the ApiVersions handshake too (as librdkafka's), closes the connection: nothing
    is left behind."""
    accepted = 0
    closed_by_client = anyio.Event()

    async def mute(stream: anyio.abc.SocketStream) -> None:
        nonlocal accepted
        accepted += 1
        async with stream:
            try:
                while True:
                    await stream.receive()  # the request, never answered
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                closed_by_client.set()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, mute)
        with anyio.fail_after(10):
            async with open_admin(
                bootstrap_servers=f"127.0.0.1:{port}",
                request_timeout_ms=60_000,
                socket_connection_setup_timeout_ms=1000,
                **QUICK,
            ) as admin:
                with pytest.raises(
                    ApiTimeoutError, match="describe_cluster: no result within 300 ms"
                ):
                    await admin.describe_cluster(timeout_ms=300)
                # Closed while the admin client is open.
                await closed_by_client.wait()
        assert accepted >= 1
        tg.cancel_scope.cancel()


async def list_groups_timeout(port: int) -> ApiTimeoutError:
    """What ``list_groups`` with a 200 ms bound raises, bootstrapped at ``port``."""
    with anyio.fail_after(10):
        async with open_admin(bootstrap_servers=f"127.0.0.1:{port}", **QUICK) as admin:
            with pytest.raises(ApiTimeoutError) as caught:
                await admin.list_groups(timeout_ms=200)
    return caught.value


async def test_no_broker_at_all_is_a_timeout_caused_by_the_connect_failures() -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0) as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
    error = await list_groups_timeout(port)
    assert isinstance(error.__cause__, NoBrokersAvailableError)
    assert "attempt(s)" in str(error)


async def test_a_broker_that_never_answers_is_a_timeout_saying_the_attempt_waited() -> None:
    """Nothing failed (the connection is accepted, the ApiVersions never answered):
    the timeout says the last attempt was still waiting, not just that time ran out."""
    async with await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0) as listener:
        error = await list_groups_timeout(listener.extra(anyio.abc.SocketAttribute.local_port))
    assert "the last attempt was still waiting for an answer" in str(error)


# -- brokerlite behind the fault proxy --------------------------------------------------------

_BROKER_TESTS = str(Path(__file__).resolve().parents[1] / "brokerlite")
if _BROKER_TESTS not in sys.path:
    sys.path.insert(0, _BROKER_TESTS)


def test_against_brokerlite_loading_coordinators_and_moved_leaders_are_waited_out(
    tmp_path: Path,
) -> None:
    """Answers of the real broker rewritten on their way: DescribeGroups and
    OffsetFetch say the coordinator is loading, ListOffsets that a leader moved,
    twice each; the calls give what an unchanged broker gives."""
    from brokerlite_faultproxy import FaultPlan, FaultProxy

    from trafka.brokerlite.server import broker_in_thread
    from trafka.sdk import open_consumer, open_producer

    injected = {15: 2, 9: 2, 2: 2}
    seen: dict[int, int] = {}

    def rewriter(key: int, version: int, frame: bytes, rnd: random.Random) -> bytes:
        seen[key] = seen.get(key, 0) + 1
        if not injected.get(key):
            return frame
        injected[key] -= 1
        header, body = decode_response(frame, key, version)
        if key == 15:
            for g in body.groups:
                object.__setattr__(g, "error_code", LOADING)
        elif key == 9:
            for group in getattr(body, "groups", None) or [body]:
                object.__setattr__(group, "error_code", LOADING)
        else:
            for t in body.topics:
                for p in t.partitions:
                    object.__setattr__(p, "error_code", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return encode_response(header.correlation_id, key, version, body)[4:]

    plan = FaultPlan(api_keys=frozenset(injected), rewrite=0.0, rewriter=rewriter)
    with FaultProxy(plan) as proxy:
        advertised = f"127.0.0.1:{proxy.address[1]}"
        with broker_in_thread(
            port=0,
            data_dir=tmp_path / "data",
            group_initial_rebalance_delay_ms=0,
            advertised_listener=advertised,
        ) as running:
            proxy.upstream = running.address

            async def main() -> None:
                with anyio.fail_after(30):
                    await scenario()

            async def scenario() -> None:
                tp = TopicPartition("retried", 0)
                async with open_admin(bootstrap_servers=advertised, **QUICK) as admin:
                    await admin.create_topics([NewTopic("retried", 1)])
                    async with open_producer(bootstrap_servers=advertised) as producer:
                        for i in range(5):
                            await producer.send("retried", b"%d" % i)
                    async with open_consumer(
                        bootstrap_servers=advertised, group_id="retried-g"
                    ) as consumer:
                        await consumer.commit({tp: 4})
                    plan.rewrite = 1.0
                    groups = await admin.describe_groups(["retried-g"])
                    committed = await admin.list_consumer_group_offsets("retried-g")
                    ends = await admin.list_offsets({tp: "latest"})
                assert groups["retried-g"].state == "Empty"
                assert committed == {tp: 4}
                assert ends[tp] is not None and ends[tp][0] == 5

            anyio.run(main)
    assert injected == {15: 0, 9: 0, 2: 0}
    assert seen[15] == 3 and seen[9] == 3 and seen[2] == 3


# -- the consumer's offset lookups run the same way ------------------------------------------


async def test_consumer_end_offsets_ask_again_for_a_moved_leader(fake_broker: FakeBroker) -> None:
    from trafka.sdk import open_consumer

    moved = {0: ErrorCode.NOT_LEADER_OR_FOLLOWER, 2: ErrorCode.NOT_LEADER_OR_FOLLOWER}
    refuse_partitions(fake_broker, iter([moved]))
    for p, end in enumerate([4, 5, 6]):
        fake_broker.next_offset[("t", p)] = end
    async with open_consumer(bootstrap_servers=fake_broker.bootstrap, **QUICK) as consumer:
        with anyio.fail_after(10):
            ends = await consumer.end_offsets([TopicPartition("t", p) for p in range(3)])
    assert ends == {TopicPartition("t", p): 4 + p for p in range(3)}
    asked = [
        sorted(p.partition_index for t in body.topics for p in t.partitions)
        for body in sent(fake_broker, 2)
    ]
    assert asked == [[0, 1, 2], [0, 2]]


async def test_consumer_offset_lookups_end_at_default_api_timeout(
    fake_broker: FakeBroker,
) -> None:
    from trafka.sdk import open_consumer

    refuse_partitions(fake_broker, itertools.repeat({0: ErrorCode.LEADER_NOT_AVAILABLE}))
    async with open_consumer(
        bootstrap_servers=fake_broker.bootstrap, default_api_timeout_ms=300, **QUICK
    ) as consumer:
        with anyio.fail_after(10), pytest.raises(ApiTimeoutError, match="offsets_for_times") as e:
            await consumer.offsets_for_times({TopicPartition("t", 0): 0})
    assert isinstance(e.value.__cause__, KafkaError)
    assert e.value.__cause__.code == ErrorCode.LEADER_NOT_AVAILABLE
    assert len(sent(fake_broker, 2)) >= 2


async def test_consumer_committed_waits_out_a_loading_coordinator_then_times_out(
    fake_broker: FakeBroker,
) -> None:
    from trafka.sdk import open_consumer

    key, handler, _ = COORDINATOR_CALLS["list_consumer_group_offsets"]
    coordinator(fake_broker)
    fake_broker.handlers[key] = handler(codes(LOADING, ErrorCode.NOT_COORDINATOR))
    tp = TopicPartition("t", 0)
    async with open_consumer(
        bootstrap_servers=fake_broker.bootstrap, group_id="g", default_api_timeout_ms=500, **QUICK
    ) as consumer:
        with anyio.fail_after(10):
            assert await consumer.committed(tp) == 7
        assert len(sent(fake_broker, key)) == 3
        fake_broker.handlers[key] = handler(itertools.repeat(LOADING))
        with anyio.fail_after(10), pytest.raises(ApiTimeoutError, match="committed") as caught:
            await consumer.committed(tp)
    assert isinstance(caught.value.__cause__, KafkaError)
    assert caught.value.__cause__.code == LOADING
