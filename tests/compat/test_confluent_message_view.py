"""The drop-in consumer's Message over a record: the C view
(``trafka.compat.confluent._message.FetchedMessage``) answers as its Python
reference (``_consumer._Fetched``) does, call for call, and both as
confluent-kafka's ``Message`` documents: ``timestamp()`` a pair of
(``TIMESTAMP_CREATE_TIME`` / ``TIMESTAMP_LOG_APPEND_TIME`` /
``TIMESTAMP_NOT_AVAILABLE``, ms; -1 when not available), ``headers()`` a list
of (name, value) or None, ``leader_epoch()`` None when unknown, ``len()`` the
value's length, the setters replacing a field.

The C view is built by ``make test``'s install; a dev install where it did not
build fails here, unless ``TRAFKA_NO_SPEEDUPS`` turns it off.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import trafka.compat.confluent as ck
from trafka.compat.confluent import _consumer
from trafka.sdk.consumer_types import ConsumerRecord

NO_SPEEDUPS = os.environ.get("TRAFKA_NO_SPEEDUPS", "0") not in ("", "0")


def _c_view() -> Any:
    if NO_SPEEDUPS:
        pytest.skip("TRAFKA_NO_SPEEDUPS: the C view is off")
    from trafka.compat.confluent import _message

    return _message


def answers(message: Any) -> list[Any]:
    """Every getter's answer, then the setters' effects, in one list."""
    out = [
        message.topic(),
        message.partition(),
        message.offset(),
        message.key(),
        message.value(),
        message.error(),
        message.timestamp(),
        message.latency(),
        message.leader_epoch(),
        len(message),
        repr(message),
        isinstance(message, ck.Message),
    ]
    headers = message.headers()
    out += [headers, headers is message.headers()]
    message.set_key(b"k2")
    message.set_value("v\u00e9")
    out += [message.key(), message.value(), len(message), message.offset()]
    message.set_headers([("a", None)])
    out += [message.headers()]
    message.set_value(None)
    out += [len(message)]
    out += [message.deserialized_key(), message.deserialized_value(), message.delivery_count()]
    message.set_topic("other")
    message.set_error(ck.KafkaError(ck.KafkaError._FAIL))
    out += [message.topic(), message.error(), repr(message)]
    return out


records = st.builds(
    ConsumerRecord,
    topic=st.text(min_size=1, max_size=5),
    partition=st.integers(0, 100),
    offset=st.integers(0, 2**63 - 1),
    timestamp=st.integers(-1, 2**50),
    key=st.none() | st.binary(max_size=8),
    value=st.none() | st.binary(max_size=40),
    headers=st.lists(
        st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=3
    ).map(tuple),
    timestamp_type=st.sampled_from([0, 1, -1]),
    leader_epoch=st.integers(-1, 50),
)


@given(records)
def test_the_c_view_answers_as_its_python_reference(record: ConsumerRecord) -> None:
    c = _c_view()
    assert answers(c.FetchedMessage(record)) == answers(_consumer._Fetched(record))
    assert [answers(m) for m in c.wrap([record, record])] == [
        answers(_consumer._Fetched(record)) for _ in range(2)
    ]


@pytest.mark.parametrize("kind", ["c", "python"])
def test_a_views_answers_follow_confluent_kafkas_message(kind: str) -> None:
    make = _c_view().FetchedMessage if kind == "c" else _consumer._Fetched
    record = ConsumerRecord("t", 3, 42, 1700, b"k", b"value", (("h", b"1"),), 0, 7)
    m = make(record)
    assert (m.topic(), m.partition(), m.offset(), m.key(), m.value()) == (
        "t",
        3,
        42,
        b"k",
        b"value",
    )
    assert m.timestamp() == (ck.TIMESTAMP_CREATE_TIME, 1700)
    assert m.headers() == [("h", b"1")] and m.error() is None and m.latency() is None
    assert m.leader_epoch() == 7 and len(m) == 5
    appended = make(record._replace(timestamp_type=1, headers=(), leader_epoch=-1))
    assert appended.timestamp() == (ck.TIMESTAMP_LOG_APPEND_TIME, 1700)
    assert appended.headers() is None and appended.leader_epoch() is None
    # A magic 0 message has no timestamp: librdkafka's (NOT_AVAILABLE, -1).
    legacy = make(record._replace(timestamp_type=-1, timestamp=-1))
    assert legacy.timestamp() == (ck.TIMESTAMP_NOT_AVAILABLE, -1)
    assert isinstance(m, ck.Message)


def test_the_c_view_refuses_what_is_not_a_record() -> None:
    c = _c_view()
    for wrong in ((), ("t", 0), "not a tuple", None):
        with pytest.raises(TypeError):
            c.FetchedMessage(wrong)
    with pytest.raises(TypeError):
        c.wrap([("t", 0, 1)])
    with pytest.raises(TypeError):
        c.wrap(("not", "a list"))


def test_the_consumer_hands_out_the_c_view_when_it_is_built() -> None:
    view = _c_view().FetchedMessage
    assert _consumer._view is view
    record = ConsumerRecord("t", 0, 1, 2, None, b"x", (), 0, 0)
    assert all(type(m) is view for m in _consumer._wrap([record]))
