"""A librdkafka producer and consumer keep records flowing while the broker's
SASL sessions end and are re-authenticated (KIP-368): shared by the SCRAM/PLAIN
and OAUTHBEARER interop tests."""

from __future__ import annotations

import time
from typing import Any


def records_flow_while_reauthenticating(
    core: Any, producer: Any, consumer: Any, topic: str, wanted: int, errors: list[Any]
) -> None:
    """Send records one at a time (each flushed) and read them from partition 0
    until ``core`` has counted ``wanted`` re-authentications; then check that
    every record was read back in order, that no session expired (no connection
    was closed for want of re-authentication) and that no client reported an
    error while the records flowed. Closes ``consumer``: what librdkafka reports
    while closing does not count (closing tears down its group coordinator
    connection, and one caught in the middle of a re-authentication is reported
    as a failed SASL handshake, "Broker transport failure ... in state DOWN")."""
    from confluent_kafka import TopicPartition

    sent: list[bytes] = []
    got: list[bytes] = []

    def take() -> None:
        msg = consumer.poll(0.2)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg.value())

    try:
        producer.produce(topic, b"first")
        assert producer.flush(30) == 0, errors
        sent.append(b"first")
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        # The clients' connections re-authenticate several times meanwhile.
        while core.connections.sasl_reauthentications < wanted and time.monotonic() < deadline:
            value = b"v%d" % len(sent)
            producer.produce(topic, value)
            assert producer.flush(10) == 0, errors
            sent.append(value)
            take()
        while len(got) < len(sent) and time.monotonic() < deadline:
            take()
        while_flowing = list(errors)
    finally:
        consumer.close()
    assert core.connections.sasl_reauthentications >= wanted, errors
    assert core.connections.sasl_sessions_expired == 0
    assert got == sent
    assert not while_flowing, while_flowing
