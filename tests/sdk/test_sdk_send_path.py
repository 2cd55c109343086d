"""One send path (issue #65): every way a record enters a producer (the async
``send``, ``try_send`` and ``send_prepared``, the blocking ``send``) goes
through the core's one fast path (its appender, :mod:`trafka.sdk.hot_append`:
``append_hot``, and each front's ``take``/``try_send``) or the one general path
(``ProducerCore.prepare``, then the async ``send_prepared``).

Shown by behaviour against a real brokerlite: for the same inputs both producers
refuse misuse with the same error, choose the same partition for a key whichever
path the record takes (Kafka's default partitioner hashes a key with murmur2 and
keeps that for keyed records under KIP-480's sticky partitioning), tell the same
delivery report (``on_delivery``: the error, or the metadata its future holds)
and the same ``on_acknowledgement`` to interceptors (KIP-42), for a delivered
record and for one sent to a partition the topic does not have
(UNKNOWN_TOPIC_OR_PARTITION). And by structure: the core's fast path has one
caller per driver.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.sdk import NewTopic, RecordMetadata, open_admin, open_producer
from trafka.sdk.blocking import Producer
from trafka.sdk.interceptors import ProducerInterceptor

pytestmark = pytest.mark.timeout(120)

SDK = Path(__file__).resolve().parents[2] / "sdk"
PARTITIONS = 4
KEYS = [b"key-%d" % i for i in range(24)]
# Misuse, as (args, kwargs) of send(): each is refused at the call by both.
MISUSE: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((b"topic", b"v"), {}),
    (("", b"v"), {}),
    (("bad topic!", b"v"), {}),
    (("{topic}", 1.5), {}),
    (("{topic}", b"v", 3), {}),
    (("{topic}", b"v"), {"partition": -1}),
    (("{topic}", b"v"), {"partition": "0"}),
    (("{topic}", b"v"), {"headers": 5}),
    (("{topic}", b"v"), {"headers": [("h", 1)]}),
    (("{topic}", b"v"), {"timestamp_ms": "now"}),
    (("{topic}", b"v"), {"timestamp_ms": -1}),
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "send-path")


def _topic(bs: str) -> str:
    name = fresh("send-path")

    async def create() -> None:
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(name, PARTITIONS)])

    trio.run(create)
    return name


def _misuse(topic: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    return [
        (tuple(topic if a == "{topic}" else a for a in args), kwargs) for args, kwargs in MISUSE
    ]


def _refusal(call: Callable[[], Any]) -> tuple[type, str]:
    with pytest.raises(Exception) as caught:  # (compared below)
        call()
    return type(caught.value), str(caught.value)


def test_both_producers_refuse_misuse_with_the_same_error(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs)
    cases = _misuse(topic)
    async_refusals: list[tuple[type, str]] = []

    async def main() -> None:
        with trio.fail_after(60):
            async with open_producer(bootstrap_servers=bs) as producer:
                await producer.partitions_for(topic)
                for args, kwargs in cases:
                    try:
                        await producer.send(*args, **kwargs)
                    except Exception as exc:
                        async_refusals.append((type(exc), str(exc)))
                    else:
                        async_refusals.append((type(None), "not refused"))

    trio.run(main)
    with Producer(bootstrap_servers=bs) as producer:
        producer.partitions_for(topic)
        blocking_refusals = [
            _refusal(lambda a=args, k=kwargs: producer.send(*a, **k))  # type: ignore[misc]
            for args, kwargs in cases
        ]
    assert all(issubclass(kind, TypeError | ValueError) for kind, _ in blocking_refusals)
    assert async_refusals == blocking_refusals


def _sends() -> list[tuple[bytes, dict[str, Any]]]:
    """(key, extra send() arguments): each key once on the fast path (a bytes
    record and key, nothing else) and once on the general path (headers)."""
    general = {"headers": [("path", b"general")]}
    return [(key, {}) for key in KEYS] + [(key, general) for key in KEYS]


def _value(key: bytes, extra: dict[str, Any]) -> bytes:
    return key + (b"/general" if extra else b"/fast")


def test_same_partitions_and_reports_on_both_paths_of_both_producers(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs)
    sends = _sends()
    async_md: list[RecordMetadata] = []

    async def main() -> None:
        with trio.fail_after(60):
            async with open_producer(bootstrap_servers=bs, linger_ms=20) as producer:
                await producer.partitions_for(topic)
                futures = [
                    await producer.send(topic, _value(key, extra), key, **extra)
                    for key, extra in sends
                ]
                await producer.flush()
                async_md.extend(f.result() for f in futures)

    trio.run(main)
    reports: list[tuple[BaseException | None, RecordMetadata | None]] = []
    with Producer(bootstrap_servers=bs, linger_ms=20) as producer:
        producer.partitions_for(topic)
        futures = [
            producer.send(topic, _value(key, extra), key, **extra, on_delivery=_collect(reports))
            for key, extra in sends
        ]
        producer.flush()
        blocking_md = [f.result() for f in futures]
    # A key's partition is the same on either path of either producer.
    by_key: dict[bytes, set[int]] = {}
    for (key, _), a, b in zip(sends, async_md, blocking_md, strict=True):
        by_key.setdefault(key, set()).update((a.partition, b.partition))
    assert all(len(partitions) == 1 for partitions in by_key.values()), by_key
    assert len({min(ps) for ps in by_key.values()}) > 1  # the keys spread over partitions
    # The same metadata but for the offset (and the timestamp: now, as sent).
    shape = [
        (m.topic, m.partition, m.serialized_key_size, m.serialized_value_size) for m in async_md
    ]
    assert shape == [
        (m.topic, m.partition, m.serialized_key_size, m.serialized_value_size) for m in blocking_md
    ]
    # The delivery report is the future's metadata, once per record.
    assert sorted(reports, key=_order) == sorted(((None, m) for m in blocking_md), key=_order)


def _collect(
    reports: list[tuple[BaseException | None, RecordMetadata | None]],
) -> Callable[[BaseException | None, RecordMetadata | None], None]:
    return lambda error, md: reports.append((error, md))


def _order(report: tuple[Any, RecordMetadata | None]) -> tuple[int, int]:
    md = report[1]
    assert md is not None
    return md.partition, md.offset


class _Acks(ProducerInterceptor):
    def __init__(self) -> None:
        self.seen: list[tuple[str, int, str | None]] = []

    def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        self.seen.append(
            (metadata.topic, metadata.partition, None if error is None else repr(error))
        )


def test_interceptors_and_reports_hear_the_same_from_both_producers(
    broker: RunningBroker,
) -> None:
    """A delivered record, then one to partition 99 of a 4-partition topic:
    the async send raises its error, the blocking send's future holds it (it
    depends on the cluster), and both tell interceptors the same."""
    bs = broker.bootstrap_servers
    topic = _topic(bs)
    outcomes: dict[str, Any] = {}

    async def main() -> None:
        acks = _Acks()
        reports: list[tuple[BaseException | None, RecordMetadata | None]] = []
        with trio.fail_after(60):
            async with open_producer(
                bootstrap_servers=bs, interceptor_classes=[acks], on_delivery=_collect(reports)
            ) as producer:
                md = await (await producer.send(topic, b"v", b"k"))
                try:
                    await producer.send(topic, b"v", b"k", partition=99)
                except Exception as exc:
                    error: BaseException | None = exc
                else:
                    error = None
                await producer.flush()
        outcomes["async"] = (acks.seen, md, repr(error), reports)

    trio.run(main)
    acks = _Acks()
    reports: list[tuple[BaseException | None, RecordMetadata | None]] = []
    with Producer(
        bootstrap_servers=bs, interceptor_classes=[acks], on_delivery=_collect(reports)
    ) as producer:
        md = producer.send(topic, b"v", b"k").result()
        failed = producer.send(topic, b"v", b"k", partition=99)
        producer.flush()
        outcomes["blocking"] = (acks.seen, md, repr(failed.exception()), reports)
    seen, md, error, reports = outcomes["async"]
    b_seen, b_md, b_error, b_reports = outcomes["blocking"]
    assert "UNKNOWN_TOPIC_OR_PARTITION" in error and error == b_error
    assert seen == [(topic, md.partition, None), (topic, 99, error)]
    assert b_seen == [(topic, b_md.partition, None), (topic, 99, error)]
    assert md.partition == b_md.partition and b_md.offset == md.offset + 1
    # Reports: the delivered record's metadata; the async send raised the
    # other's error (no report), the blocking send's future and report hold it.
    assert reports == [(None, md)]
    assert [(e if e is None else repr(e), m) for e, m in b_reports] == [
        (None, b_md),
        (error, None),
    ]


# -- structure ----------------------------------------------------------------------------


def _referrers(name: str) -> set[str]:
    """``module:Class.function`` of every function in sdk/ that names the
    attribute ``name`` (calls it, or binds it)."""
    found: set[str] = set()
    for path in sorted(SDK.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for cls in [tree, *[n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]]:
            prefix = "" if cls is tree else f"{cls.name}."  # type: ignore[attr-defined]
            for fn in cls.body:  # type: ignore[attr-defined]
                if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                if any(isinstance(n, ast.Attribute) and n.attr == name for n in ast.walk(fn)):
                    found.add(f"{path.relative_to(SDK).as_posix()}:{prefix}{fn.name}")
    return found


def test_the_fast_path_has_one_caller_per_driver() -> None:
    """Every front appends through its core's appender (:mod:`trafka.sdk.hot_append`):
    the core makes them (``appender_for``); the async driver binds its appender's
    ``try_send`` in ``__init__`` (``send`` and ``send_prepared`` start with it);
    the blocking driver binds its own appender's ``take`` in ``__init__`` and calls
    it in ``send`` only. A second copy of the fast path in a driver would name one
    of these elsewhere."""
    assert _referrers("appender_for") == {
        "producer_core.py:ProducerCore.__init__",
        "blocking_producer.py:Producer.__init__",
    }
    assert _referrers("appender") == {
        "producer_core.py:ProducerCore.__init__",
        "producer.py:Producer.__init__",
        "producer.py:Producer.try_send",
    }
    assert _referrers("_hot_take") == {
        "blocking_producer.py:Producer.__init__",
        "blocking_producer.py:Producer.send",
    }
    assert _referrers("try_send") == {
        "producer.py:Producer.__init__",
        "producer.py:Producer.send",
        "producer.py:Producer.send_prepared",
        "producer.py:Producer.try_send",
    }
