"""Misuse never stops the SDK (issue #45, item 4 and its net).

For the public entry points of the producer, the consumers, the share consumer,
the admin client and the configuration objects, async and blocking,
hypothesis passes arguments of the wrong type and out of range. Each must be
refused at the call with a TypeError or ValueError naming the argument (never
an ExceptionGroup, never a hang: every async call runs under a deadline), and
then a valid call on the same client must still work: records sent are
acknowledged and read back from the topic, a consumer still reads, the admin
client still creates topics.

Also plain regression tests for the three cases of the issue (a topic that is
not a str, ``timestamp_ms="now"``, the async block's ExceptionGroup), and the
defence under the checks: a record that cannot be encoded fails alone, a done
callback that raises stops nothing, a task's failure never turns the block's
own error into an ExceptionGroup.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import math
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from functools import partial
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sdk_brokers import SHARE_HEARTBEATS, fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, TrafkaError
from trafka.sdk import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    AdminConfig,
    ApiTimeoutError,
    ArgumentTypeError,
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilterComponent,
    ConfigError,
    ConsumerConfig,
    KafkaError,
    NewPartitions,
    NewTopic,
    PatternType,
    ProducerConfig,
    SerializationError,
    ShareConsumerConfig,
    TopicPartition,
    open_admin,
    open_consumer,
    open_producer,
)
from trafka.sdk._util import owned_task_group
from trafka.sdk.accumulator import Accumulator
from trafka.sdk.admin import (
    FeatureUpdate,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from trafka.sdk.blocking import Admin, Consumer, Producer, ShareConsumer
from trafka.sdk.share_consumer import open_share_consumer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

# A deadline for each async call: a guard against a hang, not a measure.
CALL_BOUND = 30
EXAMPLES = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
INT32, INT64 = 2**31, 2**63
_values = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    # An authorizer that allows what no ACL names, so the ACL calls are answered.
    yield from module_broker(
        tmp_path_factory,
        "misuse",
        authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        allow_everyone_if_no_acl_found=True,
        **SHARE_HEARTBEATS,
    )


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


# -- bad values ------------------------------------------------------------------------------

_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")

#: Values of no type any argument here takes (but a bool, which poses as an int).
SCALAR_ODD = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.binary(max_size=4),
    st.dictionaries(st.text(max_size=2), st.integers(), min_size=1, max_size=2),
    st.just(object()),
    st.just(1j),
)
ODD = st.one_of(SCALAR_ODD, st.lists(st.integers(), max_size=2).map(tuple))
NOT_INT = st.one_of(ODD, st.booleans(), st.text(max_size=4))
#: Not an int, nor a tuple (which could pass for a pair).
NOT_INT_NOR_PAIR = st.one_of(SCALAR_ODD, st.booleans(), st.text(max_size=4))
NOT_STR = st.one_of(SCALAR_ODD, st.booleans(), st.integers())
#: Not bytes (nor None): what the default serializer refuses for a key or value.
NOT_BYTES = st.one_of(NOT_INT, st.integers()).filter(
    lambda v: not isinstance(v, bytes | bytearray | memoryview)
)
BAD_TOPIC_NAME = st.one_of(
    st.sampled_from(["", ".", "..", "a b", "a/b", "tópico", "x" * 250]),
    st.text(max_size=12).filter(lambda t: not _TOPIC.fullmatch(t) or t in (".", "..")),
)
BAD_TOPIC = st.one_of(NOT_STR, BAD_TOPIC_NAME)
BAD_PARTITION = st.one_of(NOT_INT, st.integers(max_value=-1), st.integers(min_value=INT32))
BAD_OFFSET = st.one_of(NOT_INT, st.integers(max_value=-1), st.integers(min_value=INT64))
BAD_TIMEOUT = st.one_of(
    st.text(max_size=3),
    st.binary(max_size=3),
    st.booleans(),
    st.just(math.nan),
    st.integers(max_value=-1),
    st.floats(max_value=-0.001),
    st.lists(st.integers(), max_size=1),
)
BAD_TP = st.one_of(
    NOT_INT_NOR_PAIR,
    st.tuples(BAD_TOPIC, st.just(0)),
    st.tuples(st.just("t"), BAD_PARTITION),
    st.tuples(st.just("t"), st.just(0), st.just(0)),
)
#: An iterable of partitions that is not one: a single string, a non-iterable,
#: or one bad partition inside a list.
BAD_TPS = st.one_of(
    st.text(min_size=1, max_size=4),
    st.integers(),
    st.builds(lambda tp: [TopicPartition("t", 0), tp], BAD_TP),
)
BAD_NAMES = st.one_of(
    st.text(min_size=1, max_size=6).filter(lambda t: not t.isspace()),
    st.integers(),
    st.builds(lambda t: ["ok", t], BAD_TOPIC),
)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def keys(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The values of ``strategy`` that can be a mapping's keys."""
    return strategy.filter(_hashable)


def named(exc: BaseException, *names: str) -> None:
    """The error is one TypeError or ValueError naming one of ``names``, and in
    the package's hierarchy (an ArgumentError, SerializationError or ConfigError)."""
    assert not isinstance(exc, BaseExceptionGroup), exc
    assert isinstance(exc, TypeError | ValueError), repr(exc)
    assert isinstance(exc, TrafkaError), repr(exc)
    assert any(name in str(exc) for name in names), (names, str(exc))


def refused(call: Callable[[], Any], *names: str) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    named(info.value, *names)


# -- the async clients, driven from the test's thread ----------------------------------------


async def _bounded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    with anyio.fail_after(CALL_BOUND):
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result


class Loop:
    """An async client opened on a trio loop in a thread (an anyio portal): the
    test's thread calls its methods one at a time, each under :data:`CALL_BOUND`."""

    def __init__(self, portal: BlockingPortal, client: Any) -> None:
        self.portal = portal
        self.client = client

    def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(_bounded, getattr(self.client, method), *args, **kwargs)
        return self.portal.call(call)

    def refused(self, names: tuple[str, ...], method: str, *args: Any, **kwargs: Any) -> None:
        refused(lambda: self(method, *args, **kwargs), *names)


@contextmanager
def opened(client: AbstractAsyncContextManager[Any]) -> Iterator[Loop]:
    with (
        start_blocking_portal("trio") as portal,
        portal.wrap_async_context_manager(client) as opened_client,
    ):
        yield Loop(portal, opened_client)


def new_topic(bs: str, partitions: int = 1) -> str:
    name = fresh("misuse")
    with Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([NewTopic(name, partitions)])
    return name


def read_back(bs: str, topic: str) -> dict[tuple[int, int], bytes]:
    """Every record of ``topic`` by (partition, offset), read up to the end offsets."""
    with Admin(bootstrap_servers=bs) as admin:
        count = admin.list_topics()[topic]
    tps = [TopicPartition(topic, p) for p in range(count)]
    out: dict[tuple[int, int], bytes] = {}
    # 50 ms fetches: the close waits for the fetch the broker holds (#60)
    with Consumer(
        bootstrap_servers=bs, auto_offset_reset="earliest", fetch_max_wait_ms=50
    ) as consumer:
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for records in consumer.getmany(timeout_ms=500).values():
                for r in records:
                    out[r.partition, r.offset] = r.value
    return out


def unique_value() -> bytes:
    return b"ok-%d" % next(_values)


# -- producer --------------------------------------------------------------------------------

#: (argument, bad values) of send(): each case names the argument its error must name.
SEND_CASES = st.one_of(
    st.tuples(st.just("topic"), BAD_TOPIC),
    st.tuples(st.just("value"), NOT_BYTES),
    st.tuples(st.just("key"), NOT_BYTES),
    st.tuples(st.just("partition"), BAD_PARTITION),
    st.tuples(
        st.just("headers"),
        st.one_of(
            st.integers(),
            st.booleans(),
            st.text(min_size=1, max_size=3),
            st.binary(min_size=1, max_size=3),
            st.lists(st.integers(), min_size=1, max_size=2),
            st.builds(lambda k: [(k, b"v")], NOT_STR),
            st.builds(lambda v: [("h", v)], st.one_of(st.integers(), st.floats(), st.booleans())),
        ),
    ),
    st.tuples(st.just("timestamp_ms"), BAD_OFFSET),
)


def _send_args(topic: str, arg: str, bad: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    args: list[Any] = [topic, b"bad record", None]
    kwargs: dict[str, Any] = {}
    if arg == "topic":
        args[0] = bad
    elif arg == "value":
        args[1] = bad
    elif arg == "key":
        args[2] = bad
    else:
        kwargs[arg] = bad
    return tuple(args), kwargs


def test_async_producer_refuses_misuse_and_goes_on(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = new_topic(bs, 2)
    sent: dict[tuple[int, int], bytes] = {}
    with opened(open_producer(bootstrap_servers=bs, max_block_ms=10_000)) as producer:

        @EXAMPLES
        @given(case=SEND_CASES)
        def check(case: tuple[str, Any]) -> None:
            arg, bad = case
            args, kwargs = _send_args(topic, arg, bad)
            for method in ("send", "send_and_wait"):
                producer.refused((arg,), method, *args, **kwargs)
            value = unique_value()
            md = producer("send_and_wait", topic, value, key=value)
            sent[md.partition, md.offset] = value

        check()
        producer.refused(("topic",), "partitions_for", b"t")
        producer.refused(("timeout_ms",), "client_instance_id", "soon")
        assert producer("try_send", b"t", b"v") is None  # not taken; send() would refuse it
    assert sent and read_back(bs, topic) == sent


def test_async_transaction_calls_refuse_misuse(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = new_topic(bs)
    with opened(open_producer(bootstrap_servers=bs, transactional_id=fresh("tid"))) as producer:
        producer("init_transactions")

        @EXAMPLES
        @given(
            case=st.one_of(
                st.tuples(st.just("offsets"), st.one_of(NOT_INT, st.integers())),
                st.builds(lambda tp: ("offsets", {tp: 1}), keys(BAD_TP)),
                st.builds(lambda o: ("offsets", {TopicPartition(topic, 0): o}), BAD_OFFSET),
                st.tuples(st.just("group_metadata"), st.one_of(NOT_STR, st.just(""))),
                st.tuples(st.just("wait"), st.one_of(st.integers(), st.text(max_size=2))),
            )
        )
        def check(case: tuple[str, Any]) -> None:
            arg, bad = case
            producer("begin_transaction")
            if arg == "wait":
                producer.refused((arg,), "commit_transaction", wait=bad)
            elif arg == "offsets":
                producer.refused((arg,), "send_offsets_to_transaction", bad, "g")
            else:
                producer.refused((arg,), "send_offsets_to_transaction", {}, bad)
            # The refusal changed nothing: the transaction commits its record.
            producer("send", topic, unique_value())
            producer("commit_transaction")

        check()
    assert len(read_back(bs, topic)) >= 1


def test_blocking_producer_refuses_misuse_in_the_callers_thread(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = new_topic(bs, 2)
    sent: dict[tuple[int, int], bytes] = {}
    with Producer(bootstrap_servers=bs, max_block_ms=10_000) as producer:

        @EXAMPLES
        @given(
            case=st.one_of(
                SEND_CASES,
                st.tuples(st.just("on_delivery"), st.one_of(st.integers(), st.text(max_size=2))),
            )
        )
        def check(case: tuple[str, Any]) -> None:
            arg, bad = case
            if arg == "on_delivery":
                refused(lambda: producer.send(topic, b"x", on_delivery=bad), arg)
            else:
                args, kwargs = _send_args(topic, arg, bad)
                refused(lambda: producer.send(*args, **kwargs), arg)
                refused(lambda: producer.send_and_wait(*args, **kwargs), arg)
            value = unique_value()
            future = producer.send(topic, value, key=value)
            refused(lambda: future.result(timeout=-1), "timeout")
            md = future.result(timeout=CALL_BOUND)
            sent[md.partition, md.offset] = value

        check()
        refused(lambda: producer.partitions_for(None), "topic")  # type: ignore[arg-type]
    assert sent and read_back(bs, topic) == sent
    refused(lambda: Producer(bootstrap_servers=bs, max_queued="many"), "max_queued")


def test_producers_serializers_name_the_key_or_the_value(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = new_topic(bs)
    with Producer(bootstrap_servers=bs, value_serializer="json", key_serializer="str") as producer:
        with pytest.raises(SerializationError, match="value"):
            producer.send(topic, {1, 2})  # a set is no JSON: raised here, not queued
        with pytest.raises(SerializationError, match="key"):
            producer.send(topic, [1], key=3)
        md = producer.send(topic, {"fine": True}, key="k").result(timeout=CALL_BOUND)
    assert read_back(bs, topic) == {(0, md.offset): b'{"fine":true}'}


# -- consumers -------------------------------------------------------------------------------


def _filled(bs: str, n: int = 3) -> tuple[str, list[bytes]]:
    topic = new_topic(bs)
    values = [b"r%d" % i for i in range(n)]
    with Producer(bootstrap_servers=bs) as producer:
        for v in values:
            producer.send(topic, v)
    return topic, values


def _consumer_case(
    topic: str,
) -> st.SearchStrategy[tuple[tuple[str, ...], str, tuple[Any, ...], dict[str, Any]]]:
    tp = TopicPartition(topic, 0)
    return st.one_of(
        st.builds(lambda b: (("partitions",), "assign", (b,), {}), BAD_TPS),
        st.builds(lambda b: (("topics",), "subscribe", (b,), {}), BAD_NAMES),
        st.builds(
            lambda b: (("pattern",), "subscribe", (), {"pattern": b}),
            st.one_of(st.integers(), st.sampled_from(["(", "[a-", "*x"])),
        ),
        st.builds(lambda b: (("listener",), "subscribe", (["t"],), {"listener": b}), st.integers()),
        st.builds(lambda b: (("partition",), "seek", (b, 0), {}), BAD_TP),
        st.builds(lambda b: (("offset",), "seek", (tp, b), {}), BAD_OFFSET),
        st.builds(lambda b: (("partitions",), "pause", (tp, b), {}), BAD_TP),
        st.builds(lambda b: (("partitions",), "seek_to_beginning", (b,), {}), BAD_TP),
        st.builds(lambda b: (("partition",), "position", (b,), {}), BAD_TP),
        st.builds(lambda b: (("timeout_ms",), "getmany", (), {"timeout_ms": b}), BAD_TIMEOUT),
        st.builds(
            lambda b: (("max_records",), "getmany", (), {"max_records": b}),
            st.one_of(
                st.floats(min_value=1),
                st.text(min_size=1, max_size=3),
                st.just(True),
                st.integers(max_value=0),
                st.integers(min_value=INT32),
            ),
        ),
        st.builds(
            lambda b: (("offsets",), "commit", (b,), {}),
            st.one_of(st.integers(), st.text(min_size=1)),
        ),
        st.builds(lambda b: (("offsets",), "commit", ({tp: b},), {}), BAD_OFFSET),
        st.builds(lambda b: (("offsets",), "commit", ({b: 1},), {}), keys(BAD_TP)),
    )


# The consumers below seek back to 0 after every refusal: a fetch already parked
# at the broker (nothing new to read) is answered after fetch.max.wait.ms, and
# only then does the read from 0 go out. 50 ms rather than the default 500 ms, so
# that each example waits that much less; the long poll is not what is tested.
SHORT_FETCH_WAIT = {"fetch_max_wait_ms": 50}


def _reads_from_the_start(read: Callable[..., Any], topic: str, values: list[bytes]) -> None:
    """A valid seek, then the records from offset 0 on."""
    tp = TopicPartition(topic, 0)
    read("seek", tp, 0)
    got: list[bytes] = []
    while len(got) < len(values):
        for records in read("getmany", tp, timeout_ms=1000).values():
            got += [r.value for r in records]
    assert got[: len(values)] == values


def test_async_consumer_refuses_misuse_and_goes_on(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, values = _filled(bs)
    tp = TopicPartition(topic, 0)
    with opened(
        open_consumer(bootstrap_servers=bs, group_id=fresh("g"), **SHORT_FETCH_WAIT)
    ) as consumer:
        consumer("assign", [tp])

        @EXAMPLES
        @given(case=_consumer_case(topic))
        def check(case: tuple[tuple[str, ...], str, tuple[Any, ...], dict[str, Any]]) -> None:
            names, method, args, kwargs = case
            consumer.refused(names, method, *args, **kwargs)
            _reads_from_the_start(consumer, topic, values)

        check()
        for names, method, args in [
            (("partitions",), "beginning_offsets", ("t",)),
            (("partitions",), "end_offsets", ([("t", -1)],)),
            (("timestamps",), "offsets_for_times", ({tp: -5},)),
            (("partition",), "committed", ("t-0",)),
            (("partition",), "lag", (("t",),)),
            (("partitions",), "resume", (5,)),
            (("topic",), "partitions_for", (b"t",)),
            (("callback",), "commit_async", ({tp: 1}, "not callable")),
        ]:
            consumer.refused(names, method, *args)
        consumer("commit", {tp: 1})
        assert consumer("committed", tp) == 1


def test_blocking_consumer_refuses_misuse_in_the_callers_thread(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, values = _filled(bs)
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=bs, group_id=fresh("g"), **SHORT_FETCH_WAIT) as consumer:
        consumer.assign([tp])

        def call(method: str, *args: Any, **kwargs: Any) -> Any:
            return getattr(consumer, method)(*args, **kwargs)

        @EXAMPLES
        @given(case=_consumer_case(topic))
        def check(case: tuple[tuple[str, ...], str, tuple[Any, ...], dict[str, Any]]) -> None:
            names, method, args, kwargs = case
            refused(lambda: call(method, *args, **kwargs), *names)
            _reads_from_the_start(call, topic, values)

        check()
        refused(lambda: consumer.getone(timeout_ms="1s"), "timeout_ms")
        refused(lambda: consumer.commit_async({tp: 1}, callback=3), "callback")
        consumer.commit({tp: 2})
        assert consumer.committed(tp) == 2
    refused(
        lambda: Consumer("orders", bootstrap_servers=bs, consumer_timeout_ms="x"),
        "consumer_timeout_ms",
    )
    refused(lambda: Consumer("a b", bootstrap_servers=bs, group_id="g"), "topics")


def test_share_consumers_refuse_misuse_and_go_on(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic, values = _filled(bs, 4)
    group = fresh("share-g")
    with Admin(bootstrap_servers=bs) as admin:
        admin.alter_group_configs({group: {"share.auto.offset.reset": "earliest"}})
    cases = st.one_of(
        st.builds(lambda b: (("topics",), "subscribe", (b,), {}), BAD_NAMES),
        st.builds(lambda b: (("timeout_ms",), "poll", (), {"timeout_ms": b}), BAD_TIMEOUT),
        st.builds(lambda b: (("timeout_ms",), "commit", (b,), {}), BAD_TIMEOUT),
        st.builds(lambda b: (("topic",), "acknowledge_offset", (b, 0, 0), {}), BAD_TOPIC),
        st.builds(
            lambda b: (("partition",), "acknowledge_offset", (topic, b, 0), {}), BAD_PARTITION
        ),
        st.builds(lambda b: (("offset",), "acknowledge_offset", (topic, 0, b), {}), BAD_OFFSET),
        st.builds(
            lambda b: (("type",), "acknowledge_offset", (topic, 0, 0, b), {}),
            st.one_of(NOT_INT, st.integers(min_value=5), st.integers(max_value=0)),
        ),
        st.builds(lambda b: (("record",), "acknowledge", (b,), {}), st.integers()),
        st.builds(
            lambda b: (("callback",), "set_acknowledgement_commit_callback", (b,), {}),
            st.integers(),
        ),
    )
    got: list[bytes] = []
    settings_ = {
        "bootstrap_servers": bs,
        "group_id": group,
        "share_acknowledgement_mode": "explicit",
    }
    with opened(open_share_consumer(topic, **settings_)) as consumer:

        @EXAMPLES
        @given(case=cases)
        def check(case: tuple[tuple[str, ...], str, tuple[Any, ...], dict[str, Any]]) -> None:
            names, method, args, kwargs = case
            consumer.refused(names, method, *args, **kwargs)
            # Still a member that takes records, acknowledges and commits them.
            for record in consumer("poll", timeout_ms=100):
                got.append(record.value)
                consumer("acknowledge", record)
            consumer("commit")

        check()
        while len(got) < len(values):
            for record in consumer("poll", timeout_ms=500):
                got.append(record.value)
                consumer("acknowledge", record)
    assert sorted(got) == sorted(values)
    with ShareConsumer(bootstrap_servers=bs, group_id=group) as blocking:
        refused(lambda: blocking.subscribe(topic), "topics")  # one string, not a list
        refused(lambda: blocking.poll(timeout_ms=-1), "timeout_ms")
        refused(lambda: blocking.commit(timeout_ms="x"), "timeout_ms")  # type: ignore[arg-type]
        blocking.subscribe([topic])
        blocking.poll(timeout_ms=0)  # a valid poll after them raises nothing
    refused(
        lambda: ShareConsumer(bootstrap_servers=bs, group_id=group, consumer_timeout_ms=-1),
        "consumer_timeout_ms",
    )


# -- admin -----------------------------------------------------------------------------------


def _admin_cases() -> st.SearchStrategy[
    tuple[tuple[str, ...], str, tuple[Any, ...], dict[str, Any]]
]:
    tp = TopicPartition("t", 0)
    bad_count = st.one_of(
        NOT_INT, st.just(0), st.integers(max_value=-2), st.integers(min_value=INT32)
    )
    return st.one_of(
        st.builds(lambda b: (("topics",), "create_topics", (b,), {}), BAD_NAMES),
        st.builds(
            lambda b: (("num_partitions",), "create_topics", (["t"],), {"num_partitions": b}),
            bad_count,
        ),
        st.builds(
            lambda b: (
                ("replication_factor",),
                "create_topics",
                (["t"],),
                {"replication_factor": b},
            ),
            st.one_of(NOT_INT, st.just(0), st.integers(max_value=-2), st.integers(min_value=2**15)),
        ),
        st.builds(
            lambda b: (("validate_only",), "create_topics", (["t"],), {"validate_only": b}),
            st.integers(),
        ),
        st.builds(lambda b: (("names",), "delete_topics", (b,), {}), BAD_NAMES),
        st.builds(lambda b: (("names",), "describe_topics", (b,), {}), BAD_NAMES),
        st.builds(lambda b: (("new_totals",), "create_partitions", ({"t": b},), {}), bad_count),
        st.builds(lambda b: (("new_totals",), "create_partitions", ({b: 2},), {}), keys(BAD_TOPIC)),
        st.builds(lambda b: (("topics",), "describe_configs", (b,), {}), BAD_NAMES),
        st.builds(lambda b: (("brokers",), "describe_configs", ((), [b]), {}), BAD_PARTITION),
        st.builds(
            lambda b: (("changes",), "alter_topic_configs", (b,), {}),
            st.one_of(st.integers(), st.text()),
        ),
        st.builds(
            lambda b: (("changes",), "alter_topic_configs", ({"t": {"retention.ms": b}},), {}),
            NOT_STR,
        ),
        st.builds(
            lambda b: (("specs",), "list_offsets", ({tp: b},), {}),
            st.one_of(st.text(max_size=3), BAD_OFFSET),
        ),
        st.builds(
            lambda b: (("before",), "delete_records", ({tp: b},), {}),
            st.one_of(NOT_INT, st.integers(max_value=-2)),
        ),
        st.builds(
            lambda b: (("group_id",), "list_consumer_group_offsets", (b,), {}),
            st.one_of(NOT_STR, st.just("")),
        ),
        st.builds(
            lambda b: (("offsets",), "alter_consumer_group_offsets", ("g", {tp: b}), {}), BAD_OFFSET
        ),
        st.builds(
            lambda b: (("group_ids",), "describe_groups", (b,), {}),
            st.one_of(st.text(min_size=1), st.integers()),
        ),
        st.builds(
            lambda b: (("group_ids",), "delete_groups", ([b],), {}), st.one_of(NOT_STR, st.just(""))
        ),
        st.builds(
            lambda b: (("partitions",), "delete_consumer_group_offsets", ("g", b), {}), BAD_TPS
        ),
        st.builds(lambda b: (("timeout_ms",), "list_topics", (), {"timeout_ms": b}), BAD_TIMEOUT),
        st.builds(
            lambda b: (("updates",), "update_features", (b,), {}),
            st.one_of(st.integers(), st.text(max_size=3), st.just({"f": 3})),
        ),
        st.builds(
            lambda b: (("election_type",), "elect_leaders", (), {"election_type": b}),
            st.one_of(
                st.integers(),
                st.text(max_size=5).filter(lambda t: t not in ("preferred", "unclean")),
            ),
        ),
        st.builds(
            lambda b: (("timeout_ms",), "describe_cluster", (), {"timeout_ms": b}), BAD_TIMEOUT
        ),
    )


def test_async_admin_refuses_misuse_and_goes_on(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    created: list[str] = []
    with opened(open_admin(bootstrap_servers=bs)) as admin:

        @EXAMPLES
        @given(case=_admin_cases())
        def check(case: tuple[tuple[str, ...], str, tuple[Any, ...], dict[str, Any]]) -> None:
            names, method, args, kwargs = case
            admin.refused(names, method, *args, **kwargs)
            name = fresh("made")
            admin("create_topics", [NewTopic(name, 1)])
            created.append(name)

        check()
        listed = admin("list_topics")
    assert created and all(listed[name] == 1 for name in created)


def test_new_topic_refuses_misuse_when_made() -> None:
    @EXAMPLES
    @given(
        case=st.one_of(
            st.tuples(st.just("name"), BAD_TOPIC),
            st.tuples(
                st.just("num_partitions"), st.one_of(NOT_INT, st.just(0), st.integers(max_value=-2))
            ),
            st.tuples(
                st.just("replication_factor"),
                st.one_of(NOT_INT, st.just(0), st.integers(min_value=2**15)),
            ),
            st.tuples(
                st.just("configs"), st.one_of(st.integers(), st.just({"k": 5}), st.just({3: "v"}))
            ),
            st.tuples(
                st.just("replica_assignments"),
                st.one_of(
                    st.just([[1, 2]]),
                    st.just({-1: [1]}),
                    st.just({0: "12"}),
                    st.just({0: [1, -2]}),
                    st.just({"0": [1]}),
                ),
            ),
        )
    )
    def check(case: tuple[str, Any]) -> None:
        arg, bad = case
        fields: dict[str, Any] = {"name": "t", arg: bad}
        refused(lambda: NewTopic(**fields), arg)
        assert NewTopic("t", 3, 1, {"cleanup.policy": "compact"}).num_partitions == 3

    check()
    # Counts and an assignment: one or the other (the assignment says both).
    for counts in ((2, -1), (-1, 1)):
        refused(
            partial(NewTopic, "t", *counts, replica_assignments={0: [1]}), "replica_assignments"
        )
    placed = NewTopic("t", replica_assignments={0: [1, 2], 1: [2, 3]})
    assert placed.replica_assignments == {0: [1, 2], 1: [2, 3]}
    for bad_new in (0, [[1]], "2"):
        refused(partial(NewPartitions, bad_new), "total_count")
    refused(lambda: NewPartitions(3, [[1], "2"]), "new_assignments")


def test_blocking_admin_refuses_misuse_in_the_callers_thread(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    with Admin(bootstrap_servers=bs) as admin:

        @EXAMPLES
        @given(case=_admin_cases())
        def check(case: tuple[tuple[str, ...], str, tuple[Any, ...], dict[str, Any]]) -> None:
            names, method, args, kwargs = case
            refused(lambda: getattr(admin, method)(*args, **kwargs), *names)

        check()
        name = fresh("made")
        admin.create_topics([NewTopic(name, 2)])
        assert admin.list_topics()[name] == 2


# -- admin: ACLs, quotas, credentials, tokens, log dirs, transactions, moves, groups ----------

Case = tuple[tuple[str, ...], str, tuple[Any, ...], dict[str, Any]]

BINDING = AclBinding(
    AclResourceType.TOPIC,
    "misuse-acl",
    PatternType.LITERAL,
    "User:nobody",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)
QUOTA = ClientQuotaAlteration(ClientQuotaEntity(user="misuse"), {"producer_byte_rate": 1024.0})


def _bad_items(good: Any, bad: st.SearchStrategy[Any] = ODD) -> st.SearchStrategy[Any]:
    """An iterable of items like ``good`` that is not one: one item alone, a
    string, an int, or a list with a bad item after a good one."""
    return st.one_of(
        st.just(good),
        st.text(min_size=1, max_size=3),
        st.integers(),
        st.builds(lambda b: [good, b], bad),
    )


#: Strings that must each be a non-empty str: one string, an int, or a bad item.
BAD_STRS = st.one_of(
    st.text(min_size=1, max_size=4),
    st.integers(),
    st.builds(lambda b: ["ok", b], st.one_of(NOT_STR, st.just(""))),
)
BAD_BOOL = st.one_of(st.integers(), st.text(max_size=2), st.none())
BAD_PRINCIPALS = st.one_of(
    st.text(min_size=1, max_size=4),
    st.integers(),
    st.builds(lambda b: ["User:ok", b], st.one_of(NOT_STR, st.sampled_from(["", "User:", ":x"]))),
)
BAD_BROKER = st.one_of(NOT_INT, st.integers(max_value=-1), st.integers(min_value=INT32))
BAD_REPLICA = st.one_of(
    NOT_INT_NOR_PAIR,
    st.tuples(st.just("t"), st.just(0)),
    st.tuples(BAD_TOPIC, st.just(0), st.just(0)),
    st.tuples(st.just("t"), BAD_PARTITION, st.just(0)),
    st.tuples(st.just("t"), st.just(0), BAD_BROKER),
)
BAD_INT16 = st.one_of(NOT_INT, st.integers(min_value=2**15), st.integers(max_value=-(2**15) - 1))


def _case(names: str, method: str, *args: Any, **kwargs: Any) -> Callable[[Any], Case]:
    """A builder of the case where ``bad`` takes the place of the one argument
    given as ``BAD`` (positional or keyword)."""

    def build(bad: Any) -> Case:
        args_ = tuple(bad if a is BAD else a for a in args)
        kwargs_ = {k: bad if v is BAD else v for k, v in kwargs.items()}
        return (names,), method, args_, kwargs_

    return build


BAD = object()  # the bad argument's place in _case


def _acl_and_quota_cases() -> st.SearchStrategy[Case]:
    return st.one_of(
        st.builds(_case("bindings", "create_acls", BAD), _bad_items(BINDING)),
        st.builds(_case("bindings", "create_acls", BAD), st.just([BINDING.as_filter()])),
        st.builds(
            _case("acl_filter", "describe_acls", BAD),
            st.one_of(NOT_STR, st.text(max_size=3), st.just(BINDING)),
        ),
        st.builds(_case("filters", "delete_acls", BAD), _bad_items(AclBindingFilter())),
        st.builds(_case("filters", "delete_acls", BAD), st.just([BINDING])),
        st.builds(_case("timeout_ms", "describe_acls", timeout_ms=BAD), BAD_TIMEOUT),
        st.builds(
            _case("components", "describe_client_quotas", BAD),
            _bad_items(ClientQuotaFilterComponent.of_entity_type("user")),
        ),
        st.builds(_case("strict", "describe_client_quotas", strict=BAD), BAD_BOOL),
        st.builds(_case("alterations", "alter_client_quotas", BAD), _bad_items(QUOTA)),
        st.builds(
            _case("validate_only", "alter_client_quotas", [QUOTA], validate_only=BAD), BAD_BOOL
        ),
    )


def _credential_cases() -> st.SearchStrategy[Case]:
    upsert = UserScramCredentialUpsertion("misuse", "pw")
    return st.one_of(
        st.builds(_case("users", "describe_user_scram_credentials", BAD), BAD_STRS),
        st.builds(_case("alterations", "alter_user_scram_credentials", BAD), _bad_items(upsert)),
        st.builds(_case("alterations", "alter_user_scram_credentials", BAD), st.just([QUOTA])),
        st.builds(_case("renewers", "create_delegation_token", renewers=BAD), BAD_PRINCIPALS),
        st.builds(
            _case("owner", "create_delegation_token", owner=BAD),
            st.one_of(NOT_STR, st.sampled_from(["", "User:", ":bob"])),
        ),
        st.builds(
            _case("max_lifetime_ms", "create_delegation_token", max_lifetime_ms=BAD),
            st.one_of(NOT_INT, st.integers(max_value=-2), st.integers(min_value=INT64)),
        ),
        *[
            st.builds(
                _case("hmac", method, BAD),
                st.one_of(st.text(max_size=3), st.integers(), st.just(b""), st.none()),
            )
            for method in ("renew_delegation_token", "expire_delegation_token")
        ],
        st.builds(
            _case("renew_period_ms", "renew_delegation_token", b"h", renew_period_ms=BAD),
            st.one_of(NOT_INT, st.integers(min_value=INT64)),
        ),
        st.builds(
            _case("expiry_period_ms", "expire_delegation_token", b"h", expiry_period_ms=BAD),
            st.one_of(NOT_INT, st.integers(min_value=INT64)),
        ),
        st.builds(_case("owners", "describe_delegation_tokens", BAD), BAD_PRINCIPALS),
    )


def _log_dir_and_move_cases() -> st.SearchStrategy[Case]:
    tp = TopicPartition("t", 0)
    return st.one_of(
        st.builds(_case("partitions", "describe_log_dirs", BAD), BAD_TPS),
        st.builds(
            _case("assignments", "alter_replica_log_dirs", BAD),
            st.one_of(st.integers(), st.text(max_size=3), st.just([("t", 0, 0)])),
        ),
        st.builds(
            lambda r: (("assignments",), "alter_replica_log_dirs", ({r: "/d"},), {}),
            keys(BAD_REPLICA),
        ),
        st.builds(
            lambda p: (("assignments",), "alter_replica_log_dirs", ({("t", 0, 0): p},), {}),
            st.one_of(NOT_STR, st.just("")),
        ),
        st.builds(
            _case("replicas", "describe_replica_log_dirs", BAD),
            st.one_of(
                st.text(min_size=1, max_size=3),
                st.integers(),
                st.builds(list, st.tuples(BAD_REPLICA)),
            ),
        ),
        st.builds(
            _case("reassignments", "alter_partition_reassignments", BAD),
            st.one_of(st.integers(), st.text(max_size=3), st.just([tp])),
        ),
        st.builds(
            lambda k: (("reassignments",), "alter_partition_reassignments", ({k: [0]},), {}),
            keys(BAD_TP),
        ),
        st.builds(
            lambda r: (("reassignments",), "alter_partition_reassignments", ({tp: r},), {}),
            st.one_of(
                st.integers(),
                st.text(min_size=1, max_size=3),
                st.builds(lambda b: [0, b], BAD_BROKER),
            ),
        ),
        st.builds(_case("partitions", "list_partition_reassignments", BAD), BAD_TPS),
        st.builds(_case("partitions", "elect_leaders", BAD), BAD_TPS),
        st.builds(_case("timeout_ms", "list_partition_reassignments", timeout_ms=BAD), BAD_TIMEOUT),
    )


def _transaction_cases() -> st.SearchStrategy[Case]:
    tp = TopicPartition("t", 0)
    return st.one_of(
        st.builds(_case("transactional_ids", "describe_transactions", BAD), BAD_STRS),
        st.builds(_case("transactional_ids", "fence_producers", BAD), BAD_STRS),
        st.builds(_case("states", "list_transactions", states=BAD), BAD_STRS),
        st.builds(
            _case("producer_ids", "list_transactions", producer_ids=BAD),
            st.one_of(
                st.text(min_size=1, max_size=3),
                st.integers(),
                st.builds(lambda b: [1, b], st.one_of(NOT_INT, st.integers(min_value=INT64))),
            ),
        ),
        st.builds(
            _case("min_duration_ms", "list_transactions", min_duration_ms=BAD),
            st.one_of(NOT_INT, st.integers(max_value=-1), st.integers(min_value=INT64)),
        ),
        st.builds(_case("partitions", "describe_producers", BAD), BAD_TPS),
        st.builds(_case("partial", "describe_producers", [tp], partial=BAD), BAD_BOOL),
        st.builds(_case("partial", "list_offsets", {tp: "latest"}, partial=BAD), BAD_BOOL),
        st.builds(_case("partition", "abort_transaction", BAD, 1, 0), BAD_TP),
        st.builds(
            _case("producer_id", "abort_transaction", tp, BAD, 0),
            st.one_of(NOT_INT, st.integers(min_value=INT64), st.integers(max_value=-INT64 - 1)),
        ),
        st.builds(_case("producer_epoch", "abort_transaction", tp, 1, BAD), BAD_INT16),
        st.builds(
            _case("coordinator_epoch", "abort_transaction", tp, 1, 0, BAD),
            st.one_of(NOT_INT, st.integers(min_value=INT32), st.integers(max_value=-INT32 - 1)),
        ),
        st.builds(_case("topics", "find_hanging_transactions", BAD), BAD_NAMES),
        st.builds(
            _case(
                "max_transaction_timeout_ms",
                "find_hanging_transactions",
                max_transaction_timeout_ms=BAD,
            ),
            st.one_of(NOT_INT, st.integers(max_value=-1), st.integers(min_value=INT32)),
        ),
        st.builds(
            _case("now_ms", "find_hanging_transactions", now_ms=BAD),
            st.one_of(NOT_INT, st.integers(max_value=-1)),
        ),
    )


def _group_and_cluster_cases() -> st.SearchStrategy[Case]:
    tp = TopicPartition("t", 0)
    bad_group = st.one_of(NOT_STR, st.just(""))
    return st.one_of(
        st.builds(_case("types", "list_groups", types=BAD), BAD_STRS),
        st.builds(_case("group_ids", "describe_share_groups", BAD), BAD_STRS),
        st.builds(_case("group_ids", "describe_group_configs", BAD), BAD_STRS),
        st.builds(
            _case("overrides_only", "describe_group_configs", ["g"], overrides_only=BAD), BAD_BOOL
        ),
        st.builds(_case("overrides_only", "describe_configs", ["t"], overrides_only=BAD), BAD_BOOL),
        st.builds(_case("include_internal", "list_topics", include_internal=BAD), BAD_BOOL),
        st.builds(
            _case("changes", "alter_group_configs", BAD),
            st.one_of(
                st.integers(),
                st.text(max_size=3),
                st.builds(lambda g: {g: {}}, keys(bad_group)),
                st.builds(lambda v: {"g": {"k": v}}, NOT_STR),
            ),
        ),
        st.builds(
            _case("changes", "alter_broker_configs", BAD),
            st.one_of(
                st.integers(),
                st.text(max_size=3),
                st.builds(
                    lambda b: {b: {}},
                    st.one_of(
                        st.text(max_size=3),
                        st.booleans(),
                        st.floats(allow_nan=False),
                        st.integers(max_value=-1),
                    ),
                ),
                st.builds(lambda v: {1: {"k": v}}, NOT_STR),
            ),
        ),
        st.builds(
            _case("names", "describe_client_metrics_configs", BAD),
            st.one_of(
                st.text(min_size=1, max_size=3), st.integers(), st.builds(lambda b: [b], NOT_STR)
            ),
        ),
        st.builds(_case("name", "alter_client_metrics_configs", BAD, {}), NOT_STR),
        st.builds(
            _case("changes", "alter_client_metrics_configs", "m", BAD),
            st.one_of(st.integers(), st.text(max_size=3), st.builds(lambda v: {"k": v}, NOT_STR)),
        ),
        st.builds(_case("group_id", "remove_members_from_consumer_group", BAD, ["m"]), bad_group),
        st.builds(
            _case("members", "remove_members_from_consumer_group", "g", BAD),
            st.one_of(
                st.text(min_size=1, max_size=3), st.integers(), st.builds(lambda b: [b], NOT_STR)
            ),
        ),
        st.builds(
            _case("reason", "remove_members_from_consumer_group", "g", ["m"], reason=BAD), NOT_STR
        ),
        st.builds(_case("partitions", "list_consumer_group_offsets", "g", BAD), BAD_TPS),
        st.builds(_case("group_id", "list_share_group_offsets", BAD), bad_group),
        st.builds(_case("partitions", "list_share_group_offsets", "g", BAD), BAD_TPS),
        st.builds(
            _case("offsets", "alter_share_group_offsets", "g", BAD),
            st.one_of(st.integers(), st.text(max_size=3), st.builds(lambda o: {tp: o}, BAD_OFFSET)),
        ),
        st.builds(_case("topics", "delete_share_group_offsets", "g", BAD), BAD_NAMES),
        st.builds(
            _case("validate_only", "create_partitions", {"t": 2}, validate_only=BAD), BAD_BOOL
        ),
        st.builds(
            _case("validate_only", "update_features", {"f": FeatureUpdate(1)}, validate_only=BAD),
            BAD_BOOL,
        ),
        st.builds(
            _case("updates", "update_features", BAD),
            st.builds(lambda u: {"f": u}, st.one_of(NOT_INT, st.integers())),
        ),
        st.builds(_case("timeout_ms", "describe_features", timeout_ms=BAD), BAD_TIMEOUT),
        st.builds(
            _case("timeout_ms", "list_client_metrics_resources", timeout_ms=BAD), BAD_TIMEOUT
        ),
        st.builds(_case("timeout_ms", "client_instance_id", BAD), BAD_TIMEOUT),
    )


#: Per family of admin calls, its cases.
ADMIN_FAMILIES: dict[str, Callable[[], st.SearchStrategy[Case]]] = {
    "acls-quotas": _acl_and_quota_cases,
    "credentials-tokens": _credential_cases,
    "log-dirs-moves": _log_dir_and_move_cases,
    "transactions": _transaction_cases,
    "groups-cluster": _group_and_cluster_cases,
}


def _admin_goes_on(call: Callable[..., Any]) -> None:
    """Valid calls of each family, answered (refusals before them changed nothing)."""
    resource = fresh("acl")
    binding = dataclasses.replace(BINDING, name=resource)
    assert call("create_acls", [binding]) == {binding: None}
    assert call("describe_acls", AclBindingFilter(name=resource)) == [binding]
    user = fresh("quota")
    entity = ClientQuotaEntity(user=user)
    call("alter_client_quotas", [ClientQuotaAlteration(entity, {"producer_byte_rate": 2048})])
    only = [ClientQuotaFilterComponent.of_entity("user", user)]
    assert call("describe_client_quotas", only) == {entity: {"producer_byte_rate": 2048.0}}
    call("alter_user_scram_credentials", [UserScramCredentialUpsertion(user, "pw")])
    assert list(call("describe_user_scram_credentials", [user])) == [user]
    with pytest.raises(KafkaError) as tokens:  # a PLAINTEXT listener: the broker's answer
        call("describe_delegation_tokens")
    assert tokens.value.code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert call("describe_log_dirs")
    assert call("list_partition_reassignments") == {}
    tid = fresh("misuse-tid")
    call("fence_producers", [tid])  # an id unknown until now gets a producer id
    assert tid in {t.transactional_id for t in call("list_transactions", min_duration_ms=0)}
    assert call("describe_transactions", [tid])[tid].transactional_id == tid


@pytest.mark.parametrize("family", list(ADMIN_FAMILIES))
def test_async_admin_refuses_misuse_of_every_call(broker: RunningBroker, family: str) -> None:
    bs = broker.bootstrap_servers
    with opened(open_admin(bootstrap_servers=bs)) as admin:

        @EXAMPLES
        @given(case=ADMIN_FAMILIES[family]())
        def check(case: Case) -> None:
            names, method, args, kwargs = case
            admin.refused(names, method, *args, **kwargs)
            assert isinstance(admin("list_topics"), dict)

        check()
        _admin_goes_on(admin)


@pytest.mark.parametrize("family", list(ADMIN_FAMILIES))
def test_blocking_admin_refuses_misuse_of_every_call(broker: RunningBroker, family: str) -> None:
    bs = broker.bootstrap_servers
    with Admin(bootstrap_servers=bs) as admin:

        def call(method: str, *args: Any, **kwargs: Any) -> Any:
            return getattr(admin, method)(*args, **kwargs)

        @EXAMPLES
        @given(case=ADMIN_FAMILIES[family]())
        def check(case: Case) -> None:
            names, method, args, kwargs = case
            refused(lambda: call(method, *args, **kwargs), *names)

        check()
        _admin_goes_on(call)


#: (class, valid fields, field, bad values) of the admin calls' argument objects.
_OBJECT_CASES: list[tuple[Callable[..., Any], dict[str, Any], str, st.SearchStrategy[Any]]] = [
    *[
        (cls, dataclasses.asdict(BINDING), field, st.one_of(NOT_INT, st.integers(min_value=30)))
        for cls in (AclBinding, AclBindingFilter)
        for field in ("resource_type", "pattern_type", "operation", "permission")
    ],
    *[
        (AclBinding, dataclasses.asdict(BINDING), field, st.sampled_from([0, 1]))
        for field in ("resource_type", "operation", "permission")  # UNKNOWN, ANY
    ],
    *[
        (cls, dataclasses.asdict(BINDING), field, NOT_STR)
        for cls in (AclBinding, AclBindingFilter)
        for field in ("name", "principal", "host")
    ],
    (ClientQuotaEntity, {}, "user", NOT_STR),
    (ClientQuotaEntity, {}, "client_id", NOT_STR),
    (ClientQuotaEntity, {}, "entries", st.one_of(st.integers(), st.text(min_size=1, max_size=3))),
    (
        ClientQuotaEntity,
        {},
        "entries",
        st.builds(lambda t: [(t, "x")], st.one_of(NOT_STR, st.just(""))),
    ),
    (
        ClientQuotaFilterComponent,
        {"entity_type": "user", "match_type": 2},
        "entity_type",
        st.one_of(NOT_STR, st.just("")),
    ),
    (
        ClientQuotaFilterComponent,
        {"entity_type": "user", "match_type": 2},
        "match_type",
        st.one_of(NOT_INT, st.integers(min_value=3), st.integers(max_value=-1)),
    ),
    (
        ClientQuotaFilterComponent,
        {"entity_type": "user", "match_type": 0, "match": "x"},
        "match",
        NOT_STR,
    ),
    (
        ClientQuotaAlteration,
        {"entity": ClientQuotaEntity(), "ops": {}},
        "entity",
        st.one_of(NOT_STR, st.text(max_size=3)),
    ),
    (
        ClientQuotaAlteration,
        {"entity": ClientQuotaEntity(user="u"), "ops": {}},
        "ops",
        st.one_of(
            st.integers(),
            st.text(max_size=3),
            st.builds(lambda k: {k: 1.0}, keys(st.one_of(NOT_STR, st.just("")))),
            st.builds(
                lambda v: {"producer_byte_rate": v},
                st.one_of(
                    st.text(max_size=2),
                    st.booleans(),
                    st.sampled_from([math.nan, math.inf, -math.inf, 10**400]),
                ),
            ),
        ),
    ),
    *[
        (cls, {"user": "u", "password": "pw"}, "user", NOT_STR)
        for cls in (UserScramCredentialUpsertion, UserScramCredentialDeletion)
    ],
    *[
        (cls, {"user": "u", "password": "pw"}, "mechanism", st.one_of(NOT_STR, st.text(max_size=8)))
        for cls in (UserScramCredentialUpsertion, UserScramCredentialDeletion)
    ],
    (UserScramCredentialUpsertion, {"user": "u", "password": "pw"}, "password", NOT_STR),
    (
        UserScramCredentialUpsertion,
        {"user": "u", "password": "pw"},
        "iterations",
        st.one_of(NOT_INT, st.integers(max_value=0), st.integers(min_value=163_841)),
    ),
    (
        UserScramCredentialUpsertion,
        {"user": "u", "password": "pw"},
        "salt",
        st.one_of(st.text(min_size=1), st.integers()),
    ),
    (
        FeatureUpdate,
        {"max_version_level": 1},
        "max_version_level",
        st.one_of(NOT_INT, st.integers(max_value=-1), st.integers(min_value=2**15)),
    ),
]


@pytest.mark.parametrize(
    ("cls", "valid", "field", "bad_values"),
    _OBJECT_CASES,
    ids=[f"{c[0].__name__}.{c[2]}" for c in _OBJECT_CASES],
)
def test_admin_argument_objects_refuse_misuse_when_made(
    cls: Callable[..., Any], valid: dict[str, Any], field: str, bad_values: st.SearchStrategy[Any]
) -> None:
    """Was: most fields were taken as they came, to fail later in a request's
    encoding (or, for a SCRAM mechanism that is not a str, as an AttributeError)."""
    if cls is UserScramCredentialDeletion:
        valid = {"user": valid["user"]}

    @settings(EXAMPLES, max_examples=10)
    @given(bad=bad_values)
    def check(bad: Any) -> None:
        refused(lambda: cls(**{**valid, field: bad}), field)

    check()
    cls(**valid)  # the same class, made right, is made


# -- configuration ---------------------------------------------------------------------------

_CONFIGS = [ProducerConfig, ConsumerConfig, ShareConsumerConfig, AdminConfig]
_BASE = {ShareConsumerConfig: {"group_id": "g"}}


def _int_fields(cls: type) -> list[str]:
    valid = cls(**_BASE.get(cls, {}))
    return [f for f in cls.__dataclass_fields__ if type(getattr(valid, f)) is int and f != "acks"]


@EXAMPLES
@given(
    data=st.data(),
    cls=st.sampled_from(_CONFIGS),
    spelling=st.sampled_from(["python", "dotted"]),
)
def test_configs_refuse_wrong_types_and_ranges_naming_the_key(
    data: st.DataObject, cls: type, spelling: str
) -> None:
    field = data.draw(st.sampled_from(_int_fields(cls)))
    bad = data.draw(
        st.one_of(
            ODD,
            st.booleans(),
            st.text(alphabet="xyz ", max_size=3),
            st.integers(max_value=-(2**40)),
            st.integers(min_value=2**64),
        )
    )
    dotted = cls.__dataclass_fields__[field].metadata.get("dotted") or field.replace("_", ".")
    base = dict(_BASE.get(cls, {}))
    with pytest.raises(ConfigError) as info:
        if spelling == "python":
            cls(**base, **{field: bad})
        else:
            cls.from_dict({dotted: bad}, **base)
    named(info.value, dotted, field)
    assert cls(**base) is not None  # a valid configuration of the same class is made


@pytest.mark.parametrize(
    ("settings_", "key"),
    [
        ({"client_id": "x" * 40_000}, "client.id"),
        ({"client_id": "\ud800"}, "client.id"),
        ({"request_timeout_ms": 2**31}, "request.timeout.ms"),
        ({"fetch_max_bytes": 2**31}, "fetch.max.bytes"),
        ({"compression_type": "gzip", "compression_level": 100}, "compression.level"),
        ({"bootstrap_servers": 9092}, "bootstrap.servers"),
        ({"enable_idempotence": "maybe"}, "enable.idempotence"),
    ],
)
def test_settings_that_would_fail_every_request_are_refused(
    settings_: dict[str, Any], key: str
) -> None:
    cls = ConsumerConfig if "fetch_max_bytes" in settings_ else ProducerConfig
    with pytest.raises(ConfigError, match=re.escape(key)):
        cls(**settings_)


def test_opening_a_client_with_a_bad_setting_raises_it_alone() -> None:
    async def main() -> None:
        with pytest.raises(ConfigError, match=r"linger\.ms"):
            async with open_producer(linger_ms="soon"):
                pass

    anyio.run(main, backend="trio")


# -- the cases, as they were reported --------------------------------------------------


@pytest.mark.parametrize("topic", [b"orders", None])
def test_a_topic_that_is_not_a_str_is_refused_and_later_sends_go_on(
    broker: RunningBroker, topic: Any
) -> None:
    """Was: nothing raised; every later send timed out (the metadata refresher
    died sorting bytes with str) and leaving the block ended in a TypeError."""
    bs = broker.bootstrap_servers
    good = new_topic(bs)
    with Producer(bootstrap_servers=bs, max_block_ms=5_000) as producer:
        with pytest.raises(TypeError, match="topic"):
            producer.send(topic, b"x")
        md = producer.send(good, b"after").result(timeout=CALL_BOUND)
    assert read_back(bs, good) == {(0, md.offset): b"after"}


def test_a_timestamp_that_is_not_an_int_is_refused_and_its_neighbours_delivered(
    broker: RunningBroker,
) -> None:
    """Was: the record was queued and killed the producer's sender; the records
    next to it failed with ClientClosedError."""
    bs = broker.bootstrap_servers
    topic = new_topic(bs)
    with Producer(bootstrap_servers=bs) as producer:
        before = producer.send(topic, b"before")
        with pytest.raises(TypeError, match="timestamp_ms"):
            producer.send(topic, b"bad", timestamp_ms="now")  # type: ignore[arg-type]
        after = producer.send(topic, b"after")
        offsets = [
            before.result(timeout=CALL_BOUND).offset,
            after.result(timeout=CALL_BOUND).offset,
        ]
    assert read_back(bs, topic) == {(0, offsets[0]): b"before", (0, offsets[1]): b"after"}


def test_the_async_block_raises_the_refusal_itself(broker: RunningBroker) -> None:
    """Was: an ExceptionGroup out of the block (the sender's EncodeError with the
    caller's ClientClosedError), though the docs promise errors unwrapped."""
    bs = broker.bootstrap_servers
    topic = new_topic(bs)

    async def main() -> Any:
        with anyio.fail_after(CALL_BOUND):
            async with open_producer(bootstrap_servers=bs) as producer:
                md = await producer.send_and_wait(topic, b"first")
                await producer.send(topic, b"bad", timestamp_ms="now")  # type: ignore[arg-type]
        return md

    with pytest.raises(ArgumentTypeError, match="timestamp_ms") as info:
        anyio.run(main, backend="trio")
    assert not isinstance(info.value, BaseExceptionGroup)
    assert read_back(bs, topic) == {(0, 0): b"first"}


# -- the defence under the checks --------------------------------------------------------------


async def test_a_tasks_failure_never_wraps_the_blocks_own_error() -> None:
    async def fails() -> None:
        raise RuntimeError("a task's bug")

    with pytest.raises(KeyError) as info:
        async with owned_task_group() as tg:
            tg.start_soon(fails)
            try:
                await anyio.sleep_forever()
            finally:
                raise KeyError("the block's own error")
    assert not isinstance(info.value, BaseExceptionGroup)


async def test_a_keyboard_interrupt_in_a_task_wins_over_the_blocks_error() -> None:
    """Ctrl-C reaches whichever task runs when it comes (trio raises it there).
    The block's error is then most likely its effect (a connect the interrupt
    ended), so the interrupt comes out, as it would from the block itself: a
    command must still exit 130, not report the error the interrupt caused."""

    async def interrupted(done: anyio.Event) -> None:
        try:
            raise KeyboardInterrupt
        finally:
            done.set()

    with pytest.raises(KeyboardInterrupt):
        async with owned_task_group() as tg:
            done = anyio.Event()
            tg.start_soon(interrupted, done)
            await done.wait()
            raise KeyError("what the interrupted task left undone")


def test_a_record_that_cannot_be_encoded_fails_alone() -> None:
    acc = Accumulator(batch_size=1 << 20, linger=0, buffer_memory=1 << 24, delivery_timeout=60)
    good = [acc.append("t", 0, 1, None, b"g%d" % i, ()) for i in range(3)]
    bad = acc.append("t", 0, "now", None, b"bad", ())  # type: ignore[arg-type]  # past the checks
    more = acc.append("t", 0, 2, None, b"more", ())
    assert good[0] is not None and bad is not None and more is not None
    drained = acc.drain(0.0, 1, lambda topic, partition: 1)
    # The records around it leave in order, in runs of the batch; it is failed.
    assert [[r[2] for r in b.records] for b in drained] == [[b"g0", b"g1", b"g2"]]
    for b in drained:
        acc.complete(b, 10)
    rest = acc.drain(0.0, 1, lambda topic, partition: 1)
    assert [[r[2] for r in b.records] for b in rest] == [[b"more"]]
    for b in rest:
        acc.complete(b, 14)
    # Its handle, as every handle of the batch, resolves with the whole batch.
    assert isinstance(bad.exception(), SerializationError)
    assert "could not be encoded" in str(bad.exception())
    assert [h.result().offset for h in good] == [10, 11, 12]  # type: ignore[union-attr]
    assert more.result().offset == 14


def test_a_record_past_the_checks_fails_alone_and_the_producer_goes_on(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    topic = new_topic(bs)

    async def main() -> list[int]:
        with anyio.fail_after(CALL_BOUND):
            async with open_producer(bootstrap_servers=bs, linger_ms=50) as producer:
                first = await producer.send(topic, b"first")
                # As if a bug let a bad record through the checks.
                bad = await producer.send_prepared((topic, b"bad", None, None, (), "now"))  # type: ignore[arg-type]
                last = await producer.send(topic, b"last")
                await producer.flush()
                assert isinstance(bad.exception(), SerializationError)
                later = await producer.send_and_wait(topic, b"later")
                return [(await first).offset, (await last).offset, later.offset]

    offsets = anyio.run(main, backend="trio")
    assert read_back(bs, topic) == dict(
        zip([(0, o) for o in offsets], [b"first", b"last", b"later"], strict=True)
    )


def test_a_done_callback_that_raises_stops_nothing(broker: RunningBroker) -> None:
    """Two batches answered in one Produce response, each record with a callback
    that raises: both records are delivered, and the producer goes on (the
    first callback's error used to leave the other batch in flight for good)."""
    bs = broker.bootstrap_servers
    topic = new_topic(bs, 2)

    async def main() -> int:
        with anyio.fail_after(CALL_BOUND):
            async with open_producer(bootstrap_servers=bs, linger_ms=200) as producer:
                futures = [await producer.send(topic, b"p%d" % p, partition=p) for p in (0, 1)]
                for future in futures:
                    future.add_done_callback(lambda _: 1 / 0)
                await producer.flush()
                assert [f.result().offset for f in futures] == [0, 0]
                refused(lambda: futures[0].add_done_callback("not callable"), "callable")  # type: ignore[arg-type]
                md = await producer.send_and_wait(topic, b"later", partition=0)
                return md.offset

    offset = anyio.run(main, backend="trio")
    assert read_back(bs, topic) == {(0, 0): b"p0", (1, 0): b"p1", (0, offset): b"later"}


def test_a_position_that_cannot_be_looked_up_says_why(broker: RunningBroker) -> None:
    """A partition of a topic that does not exist has no position to look up:
    ``position`` ends at ``default.api.timeout.ms`` (as Java's) naming what the
    metadata said, not only that the time ran out."""
    topic = fresh("never-made")
    tp = TopicPartition(topic, 0)
    with Consumer(
        bootstrap_servers=broker.bootstrap_servers,
        default_api_timeout_ms=3000,
        allow_auto_create_topics=False,
    ) as consumer:
        consumer.assign([tp])
        with pytest.raises(ApiTimeoutError) as caught:
            consumer.position(tp)
    assert f"UNKNOWN_TOPIC_OR_PARTITION for topic {topic!r}" in str(caught.value)
