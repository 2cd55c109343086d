"""Per-connection state in the sans-IO core (:mod:`trafka.brokerlite.session`).

Everything the broker knows of a connection is in its session, so closing
connections of every kind leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import gc
import struct
import time
from typing import Any

import pytest
from brokerlite_wire import create, fetch_body

from trafka.brokerlite.broker.connections import Sessions
from trafka.brokerlite.config import BrokerConfig
from trafka.brokerlite.outcomes import Parked
from trafka.brokerlite.security.sasl import UserStore
from trafka.brokerlite.session import ConnectionSession
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k11_join_group as join_group
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k71_get_telemetry_subscriptions as get_subscriptions

USERS = {"alice": "alice-secret"}


def live_sessions() -> int:
    gc.collect()
    return sum(isinstance(o, ConnectionSession) for o in gc.get_objects())


def use_connection(core: Any, conn_id: int, kind: int, *, sasl: bool) -> None:
    """Open ``conn_id`` and leave per-connection state of some ``kind`` behind."""
    core.broker.connection_opened(conn_id, f"10.0.{kind}.1:{40000 + conn_id}")
    if sasl:
        core.login("alice", USERS["alice"], conn_id=conn_id, peer=f"10.0.{kind}.1:1")
    software = api_versions.ApiVersionsRequest(
        client_software_name="leak-test", client_software_version="1"
    )
    assert core.call(18, 3, software, conn_id=conn_id).error_code == ErrorCode.NONE
    if kind == 0:
        # A Fetch long poll parked on the connection.
        body = fetch_body("t", 0, max_wait_ms=60_000)
        assert isinstance(core.send(1, 12, body, conn_id=conn_id), Parked)
    elif kind == 1:
        # A JoinGroup parked by the group coordinator: the first member's is
        # answered, each later one waits for the rebalance it started.
        join = join_group.JoinGroupRequest(
            group_id="g",
            session_timeout_ms=30_000,
            rebalance_timeout_ms=60_000,
            member_id="",
            protocol_type="consumer",
            protocols=[join_group.JoinGroupRequest.JoinGroupRequestProtocol(name="range")],
        )
        outcome = core.send(11, 3, join, conn_id=conn_id)
        assert isinstance(outcome, Parked)
    elif kind == 2:
        # An incremental fetch session (KIP-227): the cache's, not the connection's.
        body = dataclasses.replace(fetch_body("t", 0), session_epoch=0)
        assert core.call(1, 12, body, conn_id=conn_id).session_id != 0
    elif kind == 3:
        # A client telemetry instance created from the connection (KIP-714).
        answer = core.call(
            71, 0, get_subscriptions.GetTelemetrySubscriptionsRequest(), conn_id=conn_id
        )
        assert answer.error_code == ErrorCode.NONE


@pytest.mark.parametrize("sasl", [False, True], ids=["plaintext", "sasl"])
def test_closed_connections_leave_nothing_behind(open_core: Any, sasl: bool) -> None:
    settings: dict[str, Any] = {"client_telemetry_enabled": True}
    if sasl:
        settings.update(security_protocol="SASL_PLAINTEXT", sasl_users=USERS)
    core = open_core(**settings)
    broker = core.broker
    if sasl:
        core.login("alice", USERS["alice"])
    create(core, "t")
    before = live_sessions()
    conns = range(100, 300)
    for conn_id in conns:
        use_connection(core, conn_id, conn_id % 4, sasl=sasl)
    assert broker.connections.open_sessions == 1 + len(conns)
    assert broker.purgatory.by_api() == {1: 50}
    assert broker.purgatory.waiting == 100  # the fetches and the JoinGroups
    assert broker.telemetry.instance_count == 50
    if sasl:
        assert all(broker.connections.principal(c) == "alice" for c in conns)
    for conn_id in conns:
        broker.connection_closed(conn_id)
    core.poll()  # members whose JoinGroup was parked leave their groups
    assert broker.connections.open_sessions == 1  # the test's own connection 1
    assert live_sessions() == before
    assert broker.purgatory.waiting == 0
    assert not broker.has_ready()
    assert broker.telemetry.instance_count == 0
    # Forgotten for good: the ids are new connections again.
    assert all(
        broker.connections.peer(c) == "?" and broker.connections.client_software(c) is None
        for c in conns
    )
    assert all(broker.connections.principal(c) is None for c in conns)
    assert all(broker.connections.authenticating(c) is sasl for c in conns)
    # Fetch sessions outlive their connection (KIP-227), bounded by their cache.
    assert broker.fetch_sessions.size == 50


def test_the_server_drops_the_session_of_every_connection_it_closes(
    running: Any, raw_client: Any
) -> None:
    clients = [raw_client(running.address) for _ in range(20)]
    for client in clients:
        answer = client.request(18, 3, api_versions.ApiVersionsRequest())
        assert answer.error_code == ErrorCode.NONE
    assert running.broker.connections.open_sessions == 20
    # One the peer broke (an unknown API key): the broker closes it itself.
    clients[0].send_raw(struct.pack(">ihhih", 10, 999, 0, 1, -1))
    assert clients[0].is_closed_by_peer()
    for client in clients[1:]:
        client.close()
    deadline = time.monotonic() + 10
    while running.broker.connections.open_sessions and time.monotonic() < deadline:
        time.sleep(0.01)
    assert running.broker.connections.open_sessions == 0


@pytest.mark.parametrize("sasl", [False, True], ids=["plaintext", "sasl"])
def test_the_sessions_are_an_object_of_their_own(sasl: bool) -> None:
    """The connections' sessions need the settings and the SASL users, no broker:
    a connection before SASL authentication may send frames of at most
    ``sasl_server_max_receive_size`` (Kafka's 512 KiB)."""
    settings: dict[str, Any] = {"socket_request_max_bytes": 1_000_000}
    if sasl:
        settings.update(security_protocol="SASL_PLAINTEXT", sasl_users=USERS)
    config = BrokerConfig(**settings)
    sessions = Sessions(config, UserStore.from_config(config) if sasl else None)
    opened = sessions.opened(7, "10.0.0.1:5000", tls_subject="CN=client")
    assert sessions.session(7) is opened and sessions.open_sessions == 1
    # A TLS client certificate names the principal until SASL authenticates one.
    assert sessions.peer(7) == "10.0.0.1:5000" and sessions.principal_of(7) == "User:CN=client"
    assert sessions.authenticating(7) is sasl and sessions.principal(7) is None
    assert sessions.max_frame_size(7) == (524_288 if sasl else 1_000_000)
    # A connection not seen opened gets a session at its first request.
    assert sessions.session(8).peer == "?" and sessions.open_sessions == 2
    assert sessions.principal_of(8) == sessions.principal_of(9) == "User:ANONYMOUS"
    assert sessions.closed(7) is opened and sessions.closed(7) is None
    assert sessions.peer(7) == "?" and sessions.open_sessions == 1
    assert (sessions.sasl_reauthentications, sessions.sasl_sessions_expired) == (0, 0)
