"""confluent-kafka's ``ShareConsumer`` (KIP-932) without a broker, run against
``confluent_kafka`` 2.16 itself and against ``trafka.compat.confluent``: the
same calls raise the same exception types with the same words (or return the
same values) for configuration errors, argument checks, the states a call is
refused in (closed, not subscribed, implicit acknowledgement), the thread
ownership of a call, and the callbacks ``poll`` serves.

The broker named is one nothing listens on (a port of this machine just
closed): the calls tested never need one, and the clients' connection errors
are what ``error_cb`` hears.
"""

from __future__ import annotations

import importlib
import json
import logging
import socket
import threading
import types
import uuid
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(120)

APIS = ["confluent_kafka", "trafka.compat.confluent"]


def _dead_broker() -> tuple[socket.socket, str]:
    """A socket bound and never listening, and its host:port: connections to it
    are refused, and no other process can bind the port while it is held (CI: a
    port found free at collection and let go was someone's broker minutes later,
    and the clients met no connection error)."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    return held, f"127.0.0.1:{held.getsockname()[1]}"


_HELD, DEAD = _dead_broker()  # held for the module's life


def _api(name: str) -> types.ModuleType:
    return importlib.import_module(name)


def _conf(**more: Any) -> dict[str, Any]:
    return {"bootstrap.servers": DEAD, "group.id": f"g-{uuid.uuid4().hex[:8]}", **more}


def outcome(fn: Callable[[], Any]) -> tuple[str, str]:
    """What a call did: ``("ok", repr of its result)`` or the exception's type and text."""
    try:
        result = fn()
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return "ok", repr(result)


def both(scenario: Callable[[types.ModuleType], Any]) -> None:
    """``scenario`` on confluent-kafka and on the drop-in answers alike."""
    theirs, ours = (scenario(_api(name)) for name in APIS)
    assert ours == theirs


def test_the_exceptions_are_runtime_errors_not_kafka_exceptions() -> None:
    def scenario(ck: types.ModuleType) -> list[Any]:
        return [
            (
                issubclass(kind, RuntimeError),
                issubclass(kind, ck.KafkaException),
                "ShareConsumer" in dir(ck) and "DeserializingShareConsumer" in dir(ck),
            )
            for kind in (ck.IllegalStateException, ck.ConcurrentModificationException)
        ]

    both(scenario)


def test_construction_errors() -> None:
    def scenario(ck: types.ModuleType) -> list[Any]:
        sc = ck.ShareConsumer
        out = [
            outcome(lambda: sc()),
            outcome(lambda: sc("not a dict")),
            outcome(lambda: sc({"bootstrap.servers": DEAD})),
            outcome(lambda: sc({**_conf(), "on_commit": print})),
            outcome(lambda: sc(_conf(), on_commit=print)),
        ]
        # Consumer settings share groups do not take: ValueError, librdkafka's prefix.
        for key, value in [
            ("enable.auto.commit", True),
            ("auto.offset.reset", "earliest"),
            ("isolation.level", "read_committed"),
            ("group.protocol", "classic"),
            ("partition.assignment.strategy", "range"),
            ("session.timeout.ms", 10000),
            ("enable.partition.eof", True),
        ]:
            kind, text = outcome(lambda key=key, value=value: sc(_conf(**{key: value})))
            out.append((key, kind, text.split(":")[0]))
        # A setting neither knows: KafkaException with _INVALID_ARG.
        try:
            sc(_conf(**{"no.such.setting": 1}))
        except ck.KafkaException as exc:
            out.append(exc.args[0].code() == ck.KafkaError._INVALID_ARG)
        # A file that cannot be read.
        kind, text = outcome(
            lambda: sc(_conf(**{"security.protocol": "ssl", "ssl.ca.location": "/nonexistent"}))
        )
        out.append((kind, text.split(":")[0]))
        return out

    both(scenario)


def test_a_dict_keyword_arguments_or_both() -> None:
    def scenario(ck: types.ModuleType) -> list[Any]:
        out = []
        for make in (
            lambda: ck.ShareConsumer(_conf()),
            lambda: ck.ShareConsumer(**_conf()),
            lambda: ck.ShareConsumer(_conf(), logger=logging.getLogger("share-test")),
        ):
            consumer = make()
            out.append(consumer.subscription())
            consumer.close()
        consumer = ck.ShareConsumer(_conf())
        out.append(outcome(lambda: consumer.__init__(_conf())))
        consumer.close()
        return out

    both(scenario)


def test_subscriptions() -> None:
    def scenario(ck: types.ModuleType) -> list[Any]:
        with ck.ShareConsumer(_conf()) as sc:
            return [
                outcome(sc.subscription),
                outcome(lambda: sc.poll(0.1)),
                outcome(lambda: sc.subscribe("a-topic")),
                outcome(lambda: sc.subscribe(("a",))),
                outcome(lambda: sc.subscribe(None)),
                outcome(lambda: sc.subscribe([""])),
                outcome(lambda: sc.subscribe(["dup", "dup"])),
                outcome(lambda: sc.subscribe(["c", "a", "b"])),
                outcome(sc.subscription),
                outcome(lambda: sc.subscribe(["^literal-name"])),
                outcome(sc.subscription),
                outcome(lambda: sc.subscribe([7])),
                outcome(sc.subscription),
                outcome(lambda: sc.subscribe([])),
                outcome(sc.subscription),
                outcome(lambda: sc.poll(0.1)),
                outcome(sc.unsubscribe),
                outcome(sc.unsubscribe),
            ]

    both(scenario)


def test_poll_without_records() -> None:
    def scenario(ck: types.ModuleType) -> list[Any]:
        with ck.ShareConsumer(_conf()) as sc:
            sc.subscribe(["a-topic"])
            out: list[Any] = [outcome(lambda: sc.poll(timeout=None)), outcome(lambda: sc.poll("x"))]
            for timeout in (0.1, 0, True):
                batch = sc.poll(timeout)
                out.append((type(batch).__name__, batch.count(), batch.is_empty(), list(batch)))
            return out

    both(scenario)


def test_acknowledgement_checks() -> None:
    def scenario(ck: types.ModuleType) -> list[Any]:
        accept = ck.AcknowledgeType.ACCEPT
        out = []
        with ck.ShareConsumer(_conf()) as sc:  # implicit acknowledgement
            for bad in (None, "a message", 42):
                out.append(outcome(lambda bad=bad: sc.acknowledge(bad, accept))[0])
            out += [
                outcome(lambda: sc.acknowledge(ck.Message(partition=0, offset=0))),
                outcome(lambda: sc.acknowledge(ck.Message(topic="t", partition=0, offset=0))),
                outcome(lambda: sc.acknowledge(ck.Message(topic="t", partition=-1, offset=0))),
                outcome(lambda: sc.acknowledge_offset("t", 0, 0)),
                outcome(lambda: sc.acknowledge_offset("t", -1, 0)),
                outcome(lambda: sc.acknowledge_offset("t", 0, -1)),
                outcome(lambda: sc.acknowledge_offset("t", 0, 0, 9)),
                outcome(lambda: sc.acknowledge_offset("t", 0, 0, "x")),
                outcome(lambda: sc.acknowledge_offset("t", 0, 0, 1.0)),
            ]
            for bad in (None, 42, []):
                out.append(outcome(lambda bad=bad: sc.acknowledge_offset(bad, 0, 0))[0])
            for bad in ("x", None, 1.5):
                out.append(outcome(lambda bad=bad: sc.acknowledge_offset("t", bad, 0))[0])
                out.append(outcome(lambda bad=bad: sc.acknowledge_offset("t", 0, bad))[0])
        with ck.ShareConsumer(_conf(**{"share.acknowledgement.mode": "explicit"})) as sc:
            out += [
                outcome(lambda: sc.acknowledge_offset("t", 0, 0, 0)),
                outcome(lambda: sc.acknowledge_offset("t", 0, 0, 4)),
                outcome(lambda: sc.acknowledge_offset("t", 0, 0)),  # not delivered
                outcome(lambda: sc.acknowledge(ck.Message(topic="t", partition=0, offset=0))),
                outcome(lambda: sc.acknowledge_offset("t", 0, 0, ck.AcknowledgeType.REJECT)),
            ]
        return out

    both(scenario)


def test_commits_and_other_calls_without_anything_to_send() -> None:
    def scenario(ck: types.ModuleType) -> list[Any]:
        with ck.ShareConsumer(_conf()) as sc:
            out = [
                outcome(sc.commit_sync),
                outcome(lambda: sc.commit_sync(1)),
                outcome(lambda: sc.commit_sync(timeout=-1)),
                outcome(sc.commit_async),
            ]
            out += [outcome(lambda bad=bad: sc.commit_sync(bad))[0] for bad in ("x", None, [])]
            out += [
                outcome(lambda: sc.commit_sync(unknown=1.0))[0],
                outcome(lambda: sc.commit_async(1.0))[0],
                outcome(lambda: sc.commit_async(timeout=1.0))[0],
                outcome(lambda: sc.set_acknowledgement_commit_callback(5)),
                outcome(lambda: sc.set_acknowledgement_commit_callback(None)),
                outcome(lambda: sc.set_acknowledgement_commit_callback(print)),
                outcome(lambda: sc.set_sasl_credentials("user", "secret")),
                outcome(lambda: sc.set_sasl_credentials(username="u", password="p")),
                outcome(lambda: sc.set_sasl_credentials(123, "p"))[0],
                outcome(lambda: sc.set_sasl_credentials("user"))[0],
            ]
            return out

    both(scenario)


def test_every_call_of_a_closed_consumer_raises_illegal_state() -> None:
    def scenario(ck: types.ModuleType) -> list[Any]:
        sc = ck.ShareConsumer(_conf())
        sc.subscribe(["a-topic"])
        out = [outcome(sc.close), outcome(sc.close)]
        calls = [
            lambda: sc.subscribe(["x"]),
            sc.unsubscribe,
            sc.subscription,
            lambda: sc.poll(0.1),
            lambda: sc.acknowledge(None),
            lambda: sc.acknowledge_offset("t", 0, 0),
            lambda: sc.commit_sync(0.1),
            sc.commit_async,
            lambda: sc.set_sasl_credentials("u", "p"),
            lambda: sc.set_acknowledgement_commit_callback(None),
        ]
        out += [outcome(call) for call in calls]
        out.append(sc.__enter__() is sc)
        # The context manager closes on the way out, an exception in the block goes on.
        with pytest.raises(ValueError, match="boom"), ck.ShareConsumer(_conf()) as other:
            raise ValueError("boom")
        out.append(outcome(other.subscription))
        return out

    both(scenario)


def test_a_second_thread_inside_a_poll_gets_concurrent_modification() -> None:
    """error_cb runs inside poll (the broker is out of reach): a call another
    thread makes meanwhile is refused."""

    def scenario(ck: types.ModuleType) -> list[Any]:
        seen: list[BaseException] = []

        def other_thread(sc: Any) -> None:
            try:
                sc.commit_async()
            except Exception as exc:
                seen.append(exc)

        def error_cb(error: Any) -> None:
            if not seen:
                thread = threading.Thread(target=other_thread, args=(holder[0],))
                thread.start()
                thread.join()

        holder: list[Any] = []
        sc = ck.ShareConsumer(_conf(error_cb=error_cb))
        holder.append(sc)
        sc.subscribe(["a-topic"])
        for _ in range(100):  # until the broker's absence is reported
            if seen:
                break
            sc.poll(0.2)
        sc.close()
        assert seen
        exc = seen[0]
        return [
            type(exc).__name__,
            str(exc).startswith("Share consumer is not safe for multi-threaded access"),
        ]

    both(scenario)


def test_error_cb_is_called_by_poll_with_the_connection_error() -> None:
    """Queued until a call serves them: the commit or the close, without a poll."""

    def scenario(ck: types.ModuleType) -> list[Any]:
        errors: list[Any] = []
        sc = ck.ShareConsumer(_conf(error_cb=errors.append))
        sc.subscribe(["a-topic"])
        for _ in range(100):
            if errors:
                break
            sc.poll(0.2)
        sc.close()
        return [isinstance(errors[0], ck.KafkaError), errors[0].code() == ck.KafkaError._TRANSPORT]

    both(scenario)


def test_what_error_cb_raises_comes_out_of_poll() -> None:
    def scenario(ck: types.ModuleType) -> list[Any]:
        armed = [True]

        def error_cb(error: Any) -> None:
            if armed[0]:
                raise RuntimeError("from error_cb")

        sc = ck.ShareConsumer(_conf(error_cb=error_cb))
        sc.subscribe(["a-topic"])
        out = None
        for _ in range(100):
            out = outcome(lambda: sc.poll(0.2))
            if out[0] != "ok":
                break
        armed[0] = False
        sc.close()
        return [out]

    both(scenario)


def test_the_logger_gets_its_lines_from_poll() -> None:
    """``debug`` gives an INIT line at DEBUG, a socket.timeout.ms too close to
    fetch.wait.max.ms a CONFWARN warning; both reach the logger in poll."""

    def scenario(ck: types.ModuleType) -> list[Any]:
        records: list[logging.LogRecord] = []

        class Collect(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                records.append(record)

        logger = logging.getLogger(f"share-log-{uuid.uuid4().hex[:8]}")
        logger.setLevel(logging.DEBUG)
        logger.addHandler(Collect())
        sc = ck.ShareConsumer(_conf(debug="msg", logger=logger, **{"socket.timeout.ms": 100}))
        sc.subscribe(["a-topic"])
        before = len(records)
        sc.poll(0.1)
        sc.close()
        init = [r for r in records if r.getMessage().startswith("INIT ")]
        warn = [r for r in records if r.getMessage().startswith("CONFWARN ")]
        return [
            before,
            bool(init) and init[0].levelno == logging.DEBUG and init[0].name == logger.name,
            bool(warn) and warn[0].levelno == logging.WARNING,
            bool(warn) and "`fetch.wait.max.ms` (500)" in warn[0].getMessage(),
        ]

    both(scenario)


@pytest.mark.parametrize("api", APIS)
def test_oauth_cb_is_called_by_the_constructor(api: str) -> None:
    ck = _api(api)
    calls: list[str] = []

    def oauth_cb(config: str) -> tuple[str, float]:
        calls.append(config)
        return "token", 4102444800.0  # (2100)

    conf = _conf(
        oauth_cb=oauth_cb,
        **{
            "security.protocol": "sasl_plaintext",
            "sasl.mechanisms": "OAUTHBEARER",
            "sasl.oauthbearer.config": "the config",
        },
    )
    ck.ShareConsumer(conf).close()
    assert calls == ["the config"]


def test_an_oauth_cb_without_a_token_fails_the_constructor_at_once() -> None:
    """confluent-kafka waits 10 s for a token before it raises; the drop-in
    knows at once (only the drop-in is run: the wait is confluent-kafka's)."""
    ck = _api("trafka.compat.confluent")
    conf = _conf(
        oauth_cb=lambda config: "no tuple",
        **{"security.protocol": "sasl_plaintext", "sasl.mechanisms": "OAUTHBEARER"},
    )
    with pytest.raises(ck.KafkaException) as caught:
        ck.ShareConsumer(conf)
    text = str(caught.value).lower()
    assert "token" in text or "authentication" in text or "sasl" in text


def test_deserializing_share_consumer_is_a_share_consumer() -> None:
    def scenario(ck: types.ModuleType) -> list[Any]:
        dsc = ck.DeserializingShareConsumer(
            _conf(**{"key.deserializer": None, "value.deserializer": None})
        )
        dsc.subscribe(["a-topic"])
        batch = dsc.poll(0.1)
        dsc.close()
        return [
            isinstance(dsc, ck.ShareConsumer),
            ck.DeserializingShareConsumer.poll is not ck.ShareConsumer.poll,
            type(batch).__name__,
            batch.count(),
            outcome(lambda: ck.DeserializingShareConsumer({"bootstrap.servers": DEAD})),
        ]

    both(scenario)


def test_stats_cb_gets_librdkafka_statistics_from_poll() -> None:
    """Every ``statistics.interval.ms``, served by poll: a consumer's JSON, with
    the broker out of reach listed (no request answered yet)."""

    def scenario(ck: types.ModuleType) -> list[Any]:
        stats: list[str] = []
        conf = _conf(stats_cb=stats.append, **{"statistics.interval.ms": 100})
        sc = ck.ShareConsumer(conf)
        sc.subscribe(["a-topic"])
        for _ in range(100):
            if stats:
                break
            sc.poll(0.2)
        sc.close()
        parsed = json.loads(stats[0])
        return [parsed["type"], isinstance(parsed["brokers"], dict)]

    both(scenario)


def test_error_cb_hears_resolve_for_a_host_name_that_does_not_resolve() -> None:
    def scenario(ck: types.ModuleType) -> list[Any]:
        codes: list[int] = []
        conf = _conf(error_cb=lambda error: codes.append(error.code()))
        conf["bootstrap.servers"] = "no-such-host.invalid:9092"  # (.invalid never resolves)
        sc = ck.ShareConsumer(conf)
        sc.subscribe(["a-topic"])
        for _ in range(100):
            if ck.KafkaError._RESOLVE in codes:
                break
            sc.poll(0.2)
        sc.close()
        return [ck.KafkaError._RESOLVE in codes]

    both(scenario)
