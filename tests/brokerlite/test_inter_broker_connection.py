"""brokerlite's inter-broker link on the SDK's connection core, against a real brokerlite.

One in-process brokerlite on SASL_PLAINTEXT (SCRAM-SHA-256, KIP-368 sessions of
3 s) is the peer; the link is opened as another member would open it, with the
peer's own configuration (as ``trafka cluster``'s readiness check does). What the
core decides shows through the driver: the ApiVersions handshake before the login
(KIP-511; Kafka's SASL documentation: SaslHandshake follows ApiVersions), version
checks against the peer's answer, answers matched to requests (Kafka answers a
connection's requests in order, protocol guide "Network"), deadlines, and the
session renewed on the same connection before it ends (KIP-368).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from unique_names import names

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.cluster.inter_broker import InterBrokerAuthError, InterBrokerConnection
from trafka.brokerlite.server import broker_in_thread
from trafka.codec import ApiKey, UnsupportedVersionError
from trafka.codec.messages import k01_fetch as fetch_msg
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k22_init_producer_id as init_producer_id
from trafka.sdk import NewTopic, open_admin

pytestmark = pytest.mark.timeout(120)

PASSWORD = "broker-pw"
SCRAM = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_mechanism": "SCRAM-SHA-256",
    "sasl_username": "broker",
    "sasl_password": PASSWORD,
}


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path_factory.mktemp("inter-broker-link"),
        security_protocol="SASL_PLAINTEXT",
        sasl_enabled_mechanisms=("SCRAM-SHA-256",),
        sasl_users={"broker": PASSWORD},
        sasl_mechanism_inter_broker_protocol="SCRAM-SHA-256",
        inter_broker_sasl_username="broker",
        inter_broker_sasl_password=PASSWORD,
        connections_max_reauth_ms=3000,
    ) as running:
        yield running


def _run(peer: RunningBroker, test: Any, config: Any = None) -> None:
    """Run ``test(conn)`` on a link to ``peer`` opened with ``config`` (the peer's own)."""
    host, port = peer.bootstrap_servers.rsplit(":", 1)

    async def main() -> None:
        with trio.fail_after(90):
            conn = await InterBrokerConnection.open(
                config or peer.broker.config, host, int(port), "test-link", "the peer"
            )
            try:
                await test(conn)
            finally:
                await conn.aclose()

    trio.run(main)


async def _metadata(conn: InterBrokerConnection, *topics: str) -> Any:
    body = metadata.MetadataRequest(
        topics=[metadata.MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
    )
    return await conn.request(ApiKey.METADATA, body, version=1)


def _long_poll(topic: str, wait_ms: int) -> Any:
    """A consumer's Fetch v12 of ``topic``'s empty partition 0: parked ``wait_ms``."""
    partition = fetch_msg.FetchRequest.FetchPartition(
        partition=0, fetch_offset=0, partition_max_bytes=1 << 20
    )
    return fetch_msg.FetchRequest(
        replica_id=-1,
        max_wait_ms=wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[fetch_msg.FetchRequest.FetchTopic(topic=topic, partitions=[partition])],
    )


async def _topic(peer: RunningBroker) -> str:
    topic = f"link-{next(names)}"
    async with open_admin(bootstrap_servers=peer.bootstrap_servers, **SCRAM) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    return topic


def test_a_link_negotiates_versions_then_logs_in(peer: RunningBroker) -> None:
    """The link's first request is ApiVersions, then the SCRAM login, then the
    caller's requests (the listener refuses any other before a login). A version
    the peer's ApiVersions answer leaves out (InitProducerId v6, KIP-939's, unstable in
    Kafka 4.4's specs: brokerlite serves 0-5) is refused before anything is sent:
    the link stays usable."""

    async def test(conn: InterBrokerConnection) -> None:
        assert conn.version_for(ApiKey.SASL_AUTHENTICATE) == 2
        with pytest.raises(UnsupportedVersionError, match="no common version"):
            await conn.request(
                ApiKey.INIT_PRODUCER_ID,
                init_producer_id.InitProducerIdRequest(transaction_timeout_ms=1000),
                version=6,
            )
        answer = await _metadata(conn)
        assert [b.node_id for b in answer.brokers] == [peer.broker.node_id]

    _run(peer, test)


def test_a_refused_login_is_an_inter_broker_auth_error(peer: RunningBroker) -> None:
    """A wrong inter-broker password is refused (Kafka's SASL/SCRAM): an
    :class:`InterBrokerAuthError` naming the mechanism and the user, never an
    anonymous link."""
    wrong = dataclasses.replace(peer.broker.config, inter_broker_sasl_password="wrong")

    async def test(conn: InterBrokerConnection) -> None:
        raise AssertionError("the link opened")

    with pytest.raises(InterBrokerAuthError, match="refused the SCRAM-SHA-256 login of 'broker'"):
        _run(peer, test, wrong)


def test_an_answer_left_by_a_cancelled_request_is_not_taken_for_the_next(
    peer: RunningBroker,
) -> None:
    """A caller cancelled while its Fetch long-polls leaves the request in flight;
    the next request on the link gets its own answer: the Fetch's, which the
    peer sends first (answers come in request order), is read and dropped."""

    async def test(conn: InterBrokerConnection) -> None:
        topic = await _topic(peer)
        with trio.move_on_after(0.2) as waited:
            await conn.request(ApiKey.FETCH, _long_poll(topic, 1500), version=12)
        assert waited.cancelled_caught
        answer = await _metadata(conn, topic)
        assert [t.name for t in answer.topics] == [topic]
        assert answer.topics[0].error_code == 0

    _run(peer, test)


def test_a_request_past_its_deadline_loses_the_link(peer: RunningBroker) -> None:
    """A request unanswered at its deadline closes the link (a late answer would
    match no request): a Fetch parked 5 s with a 0.2 s deadline, then nothing more
    is sent on that link."""

    async def test(conn: InterBrokerConnection) -> None:
        topic = await _topic(peer)
        with pytest.raises(ConnectionError, match="no answer to API key 1 in time"):
            await conn.request(ApiKey.FETCH, _long_poll(topic, 5000), version=12, timeout=0.2)
        with pytest.raises(ConnectionError, match="is closed"):
            await _metadata(conn)

    _run(peer, test)


def test_a_link_renews_its_session_before_it_ends(peer: RunningBroker) -> None:
    """KIP-368: with ``connections.max.reauth.ms`` the peer ends each session after
    3 s and closes a connection whose next request comes later; the link logs in
    again on the same connection first, so its requests keep being answered."""

    async def test(conn: InterBrokerConnection) -> None:
        before = peer.broker.connections.sasl_reauthentications
        expired = peer.broker.connections.sasl_sessions_expired
        while peer.broker.connections.sasl_reauthentications < before + 2:
            assert (await _metadata(conn)).brokers
            await trio.sleep(0.1)
        assert peer.broker.connections.sasl_sessions_expired == expired

    _run(peer, test)
