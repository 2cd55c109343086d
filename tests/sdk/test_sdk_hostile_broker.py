"""The SDK against a broker whose answers are rewritten at random.

brokerlite serves behind the fault proxy of ``tests/brokerlite``, which here
decodes some responses, changes some of their values (error codes, numbers at
their edges, strings, list lengths, record bytes) and encodes them again. Each
case runs one scenario (producing, transactions, a group consumer, a manual
consumer, admin calls, a share consumer) with short timeouts, and checks what a
user may rely on whatever a broker says:

* the call returns or raises one of trafka's errors (:class:`TrafkaError`),
  never a bare IndexError, KeyError, TypeError, AttributeError...;
* it ends, within its own timeouts (the test allows a generous bound);
* nothing inside the client dies with an exception it logs and swallows.

The proxy's choices follow its seed, but which response each choice meets
depends on timing, so a run is not replayable exactly; a failure prints the
scenario, the seed and the error. ``TRAFKA_HOSTILE_CASES=N`` runs N cases
instead of CI's few.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from trafka.brokerlite.server import broker_in_thread
from trafka.codec import ErrorCode
from trafka.codec.protocol import decode_response, encode_response
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer
from trafka.sdk.errors import TrafkaError
from trafka.sdk.share_consumer import AcknowledgeType, open_share_consumer
from trafka.sdk.transactions import TxnState

# The fault proxy lives with the broker tests.
_BROKER_TESTS = str(Path(__file__).resolve().parents[1] / "brokerlite")
if _BROKER_TESTS not in sys.path:
    sys.path.insert(0, _BROKER_TESTS)

from brokerlite_faultproxy import Action, FaultPlan, FaultProxy  # noqa: E402
from task_dump import dump_after  # noqa: E402

CASES = int(os.environ.get("TRAFKA_HOSTILE_CASES", "24"))
TOPIC = "hostile"
# Every answer has this chance to be rewritten, and each of its values then
# this chance to change: most requests still succeed, so scenarios get far.
REWRITE = 0.25
CHANGE = 0.3
CODES = [int(code) for code in ErrorCode] + [-2, 9999]
QUICK = {
    "request_timeout_ms": 1500,
    "retry_backoff_ms": 10,
    "reconnect_backoff_ms": 10,
    "reconnect_backoff_max_ms": 50,
}


def perturb(message: Any, rnd: random.Random) -> None:
    """Change some of ``message``'s values in place (it stays encodable, mostly)."""
    if not dataclasses.is_dataclass(message):
        return
    for field in dataclasses.fields(message):
        name = field.name
        if name == "unknown_tagged_fields":
            continue
        value = getattr(message, name)
        if isinstance(value, list):
            if value and rnd.random() < CHANGE:
                value = rnd.choice([[], [*value, rnd.choice(value)], value[:-1]])
                object.__setattr__(message, name, value)
            for item in value:
                perturb(item, rnd)
            continue
        if dataclasses.is_dataclass(value):
            perturb(value, rnd)
            continue
        if value is None or rnd.random() >= CHANGE:
            continue
        new: Any
        if name.endswith("error_code"):
            new = rnd.choice(CODES)
        elif isinstance(value, bool):
            new = not value
        elif isinstance(value, int):
            new = rnd.choice([-1, 0, 1, 2, 3, 7, 2**31 - 1, -(2**31), value + 1, value - 1])
        elif isinstance(value, str):
            new = rnd.choice(["", "x", TOPIC, value + "?"])
        elif isinstance(value, bytes | bytearray | memoryview):
            data = bytes(value)
            new = rnd.choice([b"", data[: len(data) // 2], rnd.randbytes(20), data[:-1] + b"\0"])
        else:
            continue
        object.__setattr__(message, name, new)


def rewrite(key: int, version: int, frame: bytes, rnd: random.Random) -> bytes:
    """The proxy's rewriter: the frame with some values changed, or as it was
    when the change does not encode (a null where the version forbids one...)."""
    try:
        header, body = decode_response(frame, key, version)
    except Exception:
        return frame
    perturb(body, rnd)
    try:
        return encode_response(header.correlation_id, key, version, body)[4:]
    except Exception:
        return frame


# -- scenarios: each does what a user would, with short timeouts ---------------------------


async def producing(bootstrap: str, rnd: random.Random) -> None:
    async with open_producer(
        bootstrap_servers=bootstrap,
        acks=rnd.choice(["all", 1]),
        enable_idempotence=rnd.random() < 0.7,
        compression_type=rnd.choice(["none", "gzip", "lz4", "zstd"]),
        delivery_timeout_ms=3000,
        max_block_ms=3000,
        linger_ms=rnd.choice([0, 5]),
        **QUICK,
    ) as producer:
        for i in range(5):
            await producer.send(TOPIC, b"v%d" % i, key=b"k%d" % (i % 2))
        await producer.flush()


async def transactions(bootstrap: str, rnd: random.Random) -> None:
    async with open_producer(
        bootstrap_servers=bootstrap,
        transactional_id=f"hostile-{rnd.randrange(3)}",
        delivery_timeout_ms=3000,
        max_block_ms=3000,
        transaction_timeout_ms=5000,
        **QUICK,
    ) as producer:
        await producer.init_transactions()
        for _ in range(2):
            try:
                async with producer.transaction():
                    await producer.send(TOPIC, b"t", partition=rnd.randrange(2))
            except TrafkaError:
                if producer.transaction_state is TxnState.FATAL_ERROR:
                    raise


async def group_consumer(bootstrap: str, rnd: random.Random) -> None:
    async with open_consumer(
        bootstrap_servers=bootstrap,
        group_id=f"hostile-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        isolation_level=rnd.choice(["read_committed", "read_uncommitted"]),
        session_timeout_ms=6000,
        heartbeat_interval_ms=300,
        default_api_timeout_ms=3000,
        enable_auto_commit=rnd.random() < 0.5,
        auto_commit_interval_ms=100,
        **QUICK,
    ) as consumer:
        consumer.subscribe([TOPIC])
        for _ in range(4):
            await consumer.getmany(timeout_ms=250)
        await consumer.commit()


async def manual_consumer(bootstrap: str, rnd: random.Random) -> None:
    async with open_consumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset=rnd.choice(["earliest", "latest"]),
        default_api_timeout_ms=3000,
        check_crcs=True,
        **QUICK,
    ) as consumer:
        partitions = [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)]
        consumer.assign(partitions)
        consumer.seek(partitions[0], rnd.choice([0, 2, 10**6]))
        for _ in range(3):
            await consumer.getmany(timeout_ms=200)
        await consumer.position(partitions[1])
        await consumer.end_offsets(partitions)
        await consumer.offsets_for_times({partitions[0]: 0})


async def administering(bootstrap: str, rnd: random.Random) -> None:
    tp = TopicPartition(TOPIC, 0)
    calls: list[Callable[[Any], Awaitable[Any]]] = [
        lambda a: a.describe_cluster(),
        lambda a: a.list_topics(),
        lambda a: a.describe_topics([TOPIC, "absent"]),
        lambda a: a.create_topics([NewTopic(f"made-{uuid.uuid4().hex[:6]}", 2)]),
        lambda a: a.create_partitions({TOPIC: 2}, validate_only=True),
        lambda a: a.describe_configs(topics=[TOPIC], brokers=[1]),
        lambda a: a.alter_topic_configs({TOPIC: {"retention.ms": "86400000"}}),
        lambda a: a.list_offsets({tp: rnd.choice(["earliest", "latest", 0])}),
        lambda a: a.delete_records({tp: 0}),
        lambda a: a.list_groups(),
        lambda a: a.describe_groups(["hostile-g"]),
        lambda a: a.list_consumer_group_offsets("hostile-g"),
        lambda a: a.alter_consumer_group_offsets("hostile-g", {tp: 1}),
        lambda a: a.delete_groups(["hostile-gone"]),
        lambda a: a.describe_producers([tp]),
        lambda a: a.list_transactions(),
        lambda a: a.describe_transactions(["hostile-0"]),
        lambda a: a.find_hanging_transactions([TOPIC]),
        lambda a: a.fence_producers(["hostile-fenced"]),
    ]
    async with open_admin(bootstrap_servers=bootstrap, default_api_timeout_ms=3000, **QUICK) as a:
        for call in rnd.sample(calls, 4):
            try:
                await call(a)
            except TrafkaError:
                pass  # an error answer: the next call must still work


async def share_consuming(bootstrap: str, rnd: random.Random) -> None:
    explicit = rnd.random() < 0.5
    async with open_share_consumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        group_id=f"hostile-share-{uuid.uuid4().hex[:6]}",
        share_acknowledgement_mode="explicit" if explicit else "implicit",
        default_api_timeout_ms=3000,
        **QUICK,
    ) as consumer:
        kinds = [AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT]
        for _ in range(4):
            for record in await consumer.poll(timeout_ms=250):
                if explicit:
                    consumer.acknowledge(record, rnd.choice(kinds))
        await consumer.commit()


SCENARIOS = [
    producing,
    transactions,
    group_consumer,
    manual_consumer,
    administering,
    share_consuming,
]


class CrashLog(logging.Handler):
    """Records with an exception attached: a client task that failed and logged it."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


@dataclasses.dataclass
class Hostile:
    bootstrap: str
    plan: FaultPlan
    crashes: CrashLog


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    plan = FaultPlan(seed=11, api_keys=frozenset(range(100)), rewrite=0.0, rewriter=rewrite)
    crashes = CrashLog()
    log = logging.getLogger("trafka.sdk")
    log.addHandler(crashes)
    with FaultProxy(plan) as proxy:
        advertised = f"127.0.0.1:{proxy.address[1]}"
        with broker_in_thread(
            port=0,
            data_dir=tmp_path_factory.mktemp("hostile") / "data",
            group_initial_rebalance_delay_ms=0,
            advertised_listener=advertised,
        ) as running:
            proxy.upstream = running.address

            async def setup() -> None:
                async with open_admin(bootstrap_servers=advertised) as admin:
                    await admin.create_topics([NewTopic(TOPIC, 2)])
                async with open_producer(bootstrap_servers=advertised) as producer:
                    for i in range(20):
                        await producer.send(TOPIC, b"seed-%d" % i, partition=i % 2)

            anyio.run(setup)  # answers pass untouched until the plan says otherwise
            plan.rewrite = REWRITE
            try:
                yield Hostile(advertised, plan, crashes)
            finally:
                log.removeHandler(crashes)
            assert plan.counts[Action.REWRITE] > 0, "no answer was rewritten: nothing was tested"


@pytest.mark.parametrize("case", range(CASES))
def test_the_sdk_survives_rewritten_answers(hostile: Hostile, case: int) -> None:
    scenario = SCENARIOS[case % len(SCENARIOS)]
    rnd = random.Random(case)
    backend = "trio" if case % 2 == 0 else "asyncio"
    hostile.crashes.records.clear()

    stacks: list[str] = []

    async def run() -> bool:
        with anyio.move_on_after(40) as scope:  # the scenarios' timeouts are a few seconds
            async with anyio.create_task_group() as tg:
                tg.start_soon(dump_after, 39, stacks)  # where the client hangs, if it does
                try:
                    await scenario(hostile.bootstrap, rnd)
                except TrafkaError:
                    pass  # a clear error is a right answer to a lying broker
                tg.cancel_scope.cancel()
        return scope.cancelled_caught

    what = f"{scenario.__name__} (case {case}, {backend})"
    try:
        hung = anyio.run(run, backend=backend)
    except Exception as exc:  # anything else is the bug this test is for
        raise AssertionError(f"{what} raised {type(exc).__name__}: {exc}") from exc
    assert not hung, (
        f"{what} did not end: a client wait is not bounded by its timeouts; "
        f"its tasks waited here:\n{''.join(stacks)}"
    )
    crashed = [
        f"{r.getMessage()}: {r.exc_info[1]!r}" for r in hostile.crashes.records if r.exc_info
    ]
    assert not crashed, f"{what}: client tasks logged crashes: {crashed}"
