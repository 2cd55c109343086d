"""SASL clients' records routed by key, as their own principal (:mod:`trafka.proxy.principals`).

The client's SASL exchange passes through to the broker; once the broker's
answers say it succeeded, the proxy routes the client's Produce requests over
pooled connections that log in with the login the operator gave the proxy for
that principal, so the brokers' ACLs (KIP-11 authorizer, ``User:<name>``
principals) apply to the client. SCRAM is RFC 5802/7677 with Kafka's KIP-84 and
the ``tokenauth`` extension of KIP-48; PLAIN is RFC 4616; OAUTHBEARER is RFC
7628 with KIP-255's principal from the token's ``sub`` claim.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import confluent_kafka
import pytest
import trio
from proxy_helpers import fresh, placement

from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster
from trafka.brokerlite.server import broker_in_thread
from trafka.codec import protocol
from trafka.codec.errors import ErrorCode
from trafka.codec.framing import FrameReader
from trafka.codec.messages import k00_produce as pm
from trafka.codec.messages import k03_metadata as md
from trafka.codec.messages import k17_sasl_handshake as hs
from trafka.codec.messages import k36_sasl_authenticate as sa
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.oauthbearer import client_message, unsecured_token
from trafka.codec.records import encode_batch
from trafka.codec.sasl import ScramClient, plain_message
from trafka.proxy import RunningProxy, proxy_in_thread, serve_proxy
from trafka.proxy.principals import SaslWatch, load_credentials
from trafka.sdk import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    NewTopic,
    PatternType,
    open_admin,
    open_producer,
)
from trafka.sdk.partitioners import murmur2_partition

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 6
KEYS = 31
USERS = {
    "admin": "admin-pw",
    "broker": "broker-pw",
    "alice": "alice-pw",
    "bob": "bob-pw",
    "carol": "carol-pw",
}
BROKER_SASL: dict[str, Any] = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_users": USERS,
    "sasl_enabled_mechanisms": ("PLAIN", "SCRAM-SHA-256"),
    "authorizer_class_name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super_users": ("User:admin", "User:broker"),
}


def as_user(user: str, mechanism: str = "PLAIN", password: str | None = None) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_username": user,
        "sasl_password": USERS[user] if password is None else password,
    }


def librdkafka_as(user: str) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


@pytest.fixture
def credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The logins the proxy holds: alice's password from the environment, bob's in
    the file; none for carol (nor admin: the proxy holds no privileged login)."""
    monkeypatch.setenv("PROXY_TEST_ALICE_PW", USERS["alice"])
    path = tmp_path / "principals.json"
    path.write_text(
        json.dumps(
            {
                "User:alice": {
                    "mechanism": "SCRAM-SHA-256",
                    "username": "alice",
                    "password_env": "PROXY_TEST_ALICE_PW",
                },
                "User:bob": {"mechanism": "PLAIN", "username": "bob", "password": USERS["bob"]},
            }
        )
    )
    return str(path)


# -- what the proxy reads of an exchange -------------------------------------------------------


def test_plain_principal_is_known_once_the_broker_accepts() -> None:
    watch = SaslWatch()
    watch.handshake("PLAIN")
    watch.request(plain_message("alice", "wrong"))
    assert watch.answered(ErrorCode.SASL_AUTHENTICATION_FAILED, b"") is None
    assert watch.principal is None
    watch.handshake("PLAIN")
    watch.request(plain_message("alice", "alice-pw"))
    assert watch.answered(0, b"") == "User:alice"


def test_scram_principal_needs_the_server_final_answer() -> None:
    """RFC 5802: the first answer (server-first) comes before the proof is
    checked; only an error-free server-final means the client proved itself."""
    for proof_ok, expected in ((False, None), (True, "User:a,b=c")):
        watch = SaslWatch()
        watch.handshake("SCRAM-SHA-256")
        scram = ScramClient("SCRAM-SHA-256", "a,b=c", "pw")
        watch.request(scram.first_message())
        assert watch.answered(0, b"r=nonce,s=c2FsdA==,i=4096") is None
        assert watch.principal is None
        watch.request(b"c=biws,r=nonce,p=proof")
        code = 0 if proof_ok else ErrorCode.SASL_AUTHENTICATION_FAILED
        assert watch.answered(code, b"v=signature" if proof_ok else b"") == expected
        assert watch.principal == expected


def test_a_delegation_token_login_names_no_principal() -> None:
    """KIP-48: with ``tokenauth`` the SCRAM name is a token id; its owner is the
    broker's to know, so the client stays unrouted."""
    watch = SaslWatch()
    watch.handshake("SCRAM-SHA-256")
    scram = ScramClient("SCRAM-SHA-256", "token-id", "hmac", extensions={"tokenauth": "true"})
    watch.request(scram.first_message())
    watch.answered(0, b"r=x,s=c2FsdA==,i=4096")
    watch.request(b"c=biws,r=x,p=proof")
    assert watch.answered(0, b"v=signature") is None
    assert watch.principal is None


def test_oauthbearer_principal_is_the_sub_claim() -> None:
    token = unsecured_token("dave", now_ms=0)
    watch = SaslWatch()
    watch.handshake("OAUTHBEARER")
    watch.request(client_message(token))
    # RFC 7628: an error challenge, then the client's 0x01, then the refusal.
    assert watch.answered(0, b'{"status":"invalid_token"}') is None
    assert watch.principal is None
    watch.handshake("OAUTHBEARER")
    watch.request(client_message(token))
    assert watch.answered(0, b"") == "User:dave"
    # Brokers may take the principal from another claim (sasl.oauthbearer.sub.claim.name).
    other = unsecured_token("dave", now_ms=0, principal_claim="uid", claims={"sub": "alice"})
    for claim, expected in (("uid", "User:dave"), ("sub", "User:alice")):
        watch = SaslWatch(claim)
        watch.handshake("OAUTHBEARER")
        watch.request(client_message(other))
        assert watch.answered(0, b"") == expected


def test_an_oauthbearer_message_with_two_tokens_names_no_principal() -> None:
    """RFC 7628 gives ``auth`` once; a message with two has no principal the proxy
    can be sure of: Kafka's OAuthBearerClientInitialResponse reads the pairs into
    a map (the last ``auth`` is the token it validates), so reading the first
    would route a client holding a valid token for mallory as the alice its
    first, unchecked token names."""
    alice, mallory = unsecured_token("alice", now_ms=0), unsecured_token("mallory", now_ms=0)
    message = f"n,,\x01auth=Bearer {alice}\x01auth=Bearer {mallory}\x01\x01".encode()
    watch = SaslWatch()
    watch.handshake("OAUTHBEARER")
    watch.request(message)
    assert watch.answered(0, b"") is None
    assert watch.principal is None


def test_reauthentication_as_someone_else_drops_the_principal() -> None:
    watch = SaslWatch()
    for user, expected in (("alice", "User:alice"), ("alice", "User:alice"), ("bob", None)):
        watch.handshake("PLAIN")
        watch.request(plain_message(user, "pw"))
        assert watch.answered(0, b"") == expected
    assert watch.principal is None


def test_each_answer_is_judged_against_its_own_request() -> None:
    """A client may write a second handshake and another name before the broker
    answered its first login: the broker's success answers the first (Kafka
    answers a connection's requests in order), so the principal is the first
    login's, never the name written last."""
    watch = SaslWatch()
    watch.handshake("PLAIN")
    watch.request(plain_message("bob", "bob-pw"))
    watch.handshake("PLAIN")
    watch.request(plain_message("alice", "wrong"))
    assert watch.answered(0, b"") == "User:bob"
    assert watch.answered(ErrorCode.ILLEGAL_SASL_STATE, b"") is None
    assert watch.principal == "User:bob"
    # SCRAM: a later exchange's first message does not rename the earlier one.
    watch = SaslWatch()
    watch.handshake("SCRAM-SHA-256")
    watch.request(ScramClient("SCRAM-SHA-256", "bob", "pw").first_message())
    watch.request(b"c=biws,r=x,p=proof")
    watch.handshake("SCRAM-SHA-256")
    watch.request(ScramClient("SCRAM-SHA-256", "alice", "pw").first_message())
    assert watch.answered(0, b"r=x,s=c2FsdA==,i=4096") is None
    assert watch.answered(0, b"v=signature") == "User:bob"
    assert watch.answered(ErrorCode.ILLEGAL_SASL_STATE, b"") is None
    assert watch.principal == "User:bob"


def test_credentials_file_keeps_its_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.json"
    monkeypatch.setenv("SECRET_OF_X", "s3cret-from-env")
    path.write_text(
        json.dumps(
            {
                "User:x": {
                    "mechanism": "scram-sha-512",
                    "username": "x",
                    "password_env": "SECRET_OF_X",
                },
                "User:t": {
                    "mechanism": "SCRAM-SHA-256",
                    "username": "token-id",
                    "password": "hmac-in-file",
                    "tokenauth": True,
                },
            }
        )
    )
    logins = load_credentials(path)
    assert logins["User:x"].password == "s3cret-from-env"
    assert logins["User:x"].mechanism == "SCRAM-SHA-512"
    assert logins["User:t"].tokenauth
    assert "s3cret" not in repr(logins) and "hmac-in-file" not in repr(logins)
    assert load_credentials(None) == {}
    for bad, says in (
        ({"User:y": {"mechanism": "PLAIN", "username": "y"}}, "needs a password"),
        ({"User:y": {"mechanism": "GSSAPI", "username": "y", "password": "p"}}, "mechanism"),
        ({"y": {"mechanism": "PLAIN", "username": "y", "password": "p"}}, "User:"),
        (
            {"User:y": {"mechanism": "PLAIN", "username": "y", "password_env": "UNSET_X_Y"}},
            "UNSET_X_Y is not set",
        ),
        (
            {"User:y": {"mechanism": "PLAIN", "username": "y", "password": "p", "tokenauth": True}},
            "SCRAM",
        ),
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=says) as error:
            load_credentials(path)
        assert "s3cret" not in str(error.value)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read"):
        load_credentials(path)


# -- against brokers ---------------------------------------------------------------------------


async def _create(servers: str, topic: str, login: dict[str, Any]) -> None:
    async with open_admin(bootstrap_servers=servers, **login) as admin:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])


async def _grant(
    servers: str,
    topic: str,
    user: str,
    *operations: AclOperation,
    resource: AclResourceType = AclResourceType.TOPIC,
) -> None:
    async with open_admin(bootstrap_servers=servers, **as_user("admin")) as admin:
        bindings = [
            AclBinding(
                resource,
                topic,
                PatternType.LITERAL,
                f"User:{user}",
                "*",
                operation,
                AclPermissionType.ALLOW,
            )
            for operation in operations
        ]
        assert await admin.create_acls(bindings) == dict.fromkeys(bindings)


def _confluent_send(servers: str, topic: str, n: int, prefix: bytes, idempotent: bool) -> None:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": servers,
            "linger.ms": 50,
            "enable.idempotence": idempotent,
            "partitioner": "consistent_random",  # CRC32, not murmur2
            **librdkafka_as("alice"),
        }
    )
    failures: list[Any] = []
    for i in range(n):
        producer.produce(
            topic,
            value=b"%s-%d" % (prefix, i),
            key=b"key-%d" % (i % KEYS),
            on_delivery=lambda err, _msg: failures.append(err) if err else None,
        )
    assert producer.flush(60) == 0
    assert failures == []


def _confluent_transactions(servers: str, topic: str) -> None:
    """alice's transactions: one committed ("t-0".."t-299"), one aborted ("a-...").

    The aborted one's records are delivered before the abort (``flush``), so
    they are written through the proxy and the abort markers must hide them.
    It also keeps the abort clear of librdkafka's issue #4849: its
    AddPartitionsToTxn for the new transaction may come while the coordinator
    still writes the committed one's markers (PrepareCommit: the answer is
    CONCURRENT_TRANSACTIONS, and librdkafka retries it). Aborted at that
    moment, librdkafka sends EndTxn(abort) anyway, which Kafka's coordinator
    refuses in PrepareCommit or CompleteCommit with INVALID_TXN_STATE, a fatal
    error; on a loaded machine the markers take long enough for that to
    happen. Once the records are delivered their partitions are in the
    transaction (Ongoing), where an abort is always taken."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": servers,
            "transactional.id": f"tx-{topic}",
            "partitioner": "consistent_random",
            "linger.ms": 20,
            **librdkafka_as("alice"),
        }
    )
    producer.init_transactions(30)
    for prefix, commit in ((b"t", True), (b"a", False)):
        producer.begin_transaction()
        for i in range(300):
            producer.produce(topic, value=b"%s-%d" % (prefix, i), key=b"key-%d" % (i % KEYS))
        if commit:
            producer.commit_transaction(30)
        else:
            assert producer.flush(30) == 0
            producer.abort_transaction(30)


def _check(records: list[Any], n: int, prefix: bytes) -> None:
    """Every record once, on its key's murmur2 partition."""
    mine = [r for r in records if r.value.startswith(prefix + b"-")]
    assert Counter(r.value for r in mine) == Counter(b"%s-%d" % (prefix, i) for i in range(n))
    assert [r for r in mine if r.partition != murmur2_partition(r.key, PARTITIONS)] == []


def test_sasl_clients_are_routed_as_themselves_across_brokers(zk: str, credentials: str) -> None:
    """A 3-broker SASL cluster with ACLs: alice's keyed records (librdkafka,
    plain, idempotent and transactional; trafka's SDK, idempotent) land on
    their murmur2 partitions, once each (an aborted transaction's unseen
    under read_committed); bob, who may see the topic but not write it, is
    refused by the brokers through the proxy's routed path."""

    async def test(cluster: LocalCluster, proxy: RunningProxy) -> None:
        topic = fresh("sasl")
        servers = proxy.bootstrap_servers
        # The administrator goes to the cluster itself: every client of the proxy is routed.
        direct = cluster.bootstrap_servers
        await _create(direct, topic, as_user("admin"))
        await _grant(direct, topic, "alice", AclOperation.WRITE, AclOperation.READ)
        await _grant(direct, topic, "bob", AclOperation.DESCRIBE)
        await _grant(
            direct, f"tx-{topic}", "alice", AclOperation.WRITE, AclOperation.DESCRIBE,
            resource=AclResourceType.TRANSACTIONAL_ID,
        )  # fmt: skip
        await _settled(cluster, topic)

        await trio.to_thread.run_sync(_confluent_send, servers, topic, 600, b"c", False)
        await trio.to_thread.run_sync(_confluent_send, servers, topic, 600, b"i", True)
        async with open_producer(
            bootstrap_servers=servers, partitioner="consistent_random", linger_ms=50,
            **as_user("alice", "SCRAM-SHA-256"),
        ) as producer:  # fmt: skip
            futures = [
                await producer.send(topic, b"s-%d" % i, key=b"key-%d" % (i % KEYS))
                for i in range(600)
            ]
            await producer.flush()
            for future in futures:
                await future
        await trio.to_thread.run_sync(_confluent_transactions, servers, topic)
        routed = proxy.statistics.routing.records_moved

        async with open_producer(
            bootstrap_servers=servers, enable_idempotence=False, retries=0, **as_user("bob")
        ) as producer:
            with pytest.raises(Exception) as refused:
                await producer.send_and_wait(topic, b"b-0", key=b"key-1")
        assert getattr(refused.value, "code", None) == ErrorCode.TOPIC_AUTHORIZATION_FAILED

        records = await trio.to_thread.run_sync(
            lambda: placement(
                cluster.bootstrap_servers, topic, PARTITIONS,
                isolation_level="read_committed", **as_user("admin"),
            )
        )  # fmt: skip
        assert len(records) == 2100  # bob's record nowhere, the aborted transaction unseen
        for prefix in (b"c", b"i", b"s"):
            _check(records, 600, prefix)
        _check(records, 300, b"t")
        stats = proxy.statistics
        assert routed > 0 and stats.routing.requests_idempotent > 0
        # Every client connection that authenticated was routed; none went unrouted.
        assert stats.sasl.get("routed", 0) > 0 and stats.sasl.get("logins", 0) > 0
        assert "unrouted" not in stats.sasl and "refused" not in stats.sasl
        assert stats.routing.batches_untouched_other_leader == 0

    async def main() -> None:
        with trio.fail_after(200):
            async with (
                serve_cluster(
                    3,
                    zookeeper_connect=zk,
                    inter_broker_sasl_username="broker",
                    inter_broker_sasl_password=USERS["broker"],
                    **BROKER_SASL,
                ) as cluster,
                serve_proxy(
                    upstream=tuple(cluster.bootstrap_servers.split(",")),
                    port=0,
                    principal_credentials=credentials,
                ) as proxy,
            ):
                await test(cluster, proxy)

    trio.run(main)


async def _settled(cluster: LocalCluster, topic: str) -> None:
    """Every partition has a leader every broker agrees on."""
    with trio.fail_after(30):
        while True:
            states = [
                {cluster.node(n).broker.cluster.state(topic, p) for n in cluster.node_ids}
                for p in range(PARTITIONS)
            ]
            if all(len(s) == 1 and None not in s for s in states):
                return
            await trio.sleep(0.05)


def test_wrong_password_opens_nothing_and_unknown_principals_follow_the_setting(
    tmp_path: Path, credentials: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrong password is refused by the broker and opens no upstream login; a
    principal the proxy holds no login for is forwarded unrouted (counted), or,
    with ``sasl_without_credentials="refuse"``, refused at authentication."""
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path / "b", **BROKER_SASL) as b:
        topic = fresh("sasl-one")

        async def setup() -> None:
            with anyio.fail_after(60):
                await _create(b.bootstrap_servers, topic, as_user("admin"))
                for user in ("alice", "carol"):
                    await _grant(b.bootstrap_servers, topic, user, AclOperation.WRITE)

        async def send(servers: str, user: str, password: str | None = None) -> int:
            with anyio.fail_after(60):
                async with open_producer(
                    bootstrap_servers=servers, enable_idempotence=False,
                    **as_user(user, "SCRAM-SHA-256", password),
                ) as producer:  # fmt: skip
                    return int((await producer.send_and_wait(topic, b"v", key=b"key-3")).partition)

        anyio.run(setup, backend="trio")
        expected = murmur2_partition(b"key-3", PARTITIONS)
        upstream = (b.bootstrap_servers,)
        with proxy_in_thread(upstream=upstream, port=0, principal_credentials=credentials) as px:
            with pytest.raises(Exception, match="refused the SASL authentication"):
                anyio.run(send, px.bootstrap_servers, "alice", "not-alice-pw", backend="trio")
            assert px.statistics.sasl == {}  # no principal learned, no login opened
            assert anyio.run(send, px.bootstrap_servers, "alice", backend="trio") == expected
            assert px.statistics.sasl["routed"] >= 1 and px.statistics.sasl["logins"] >= 1
            logins = px.statistics.sasl["logins"]
            assert anyio.run(send, px.bootstrap_servers, "carol", backend="trio") == expected
            assert px.statistics.sasl["unrouted"] >= 1
            assert px.statistics.sasl["logins"] == logins  # nothing opened for carol
        with proxy_in_thread(
            upstream=upstream,
            port=0,
            principal_credentials=credentials,
            sasl_without_credentials="refuse",
        ) as px:
            with pytest.raises(Exception, match="routes no records for User:carol"):
                anyio.run(send, px.bootstrap_servers, "carol", backend="trio")
            assert px.statistics.sasl["refused"] >= 1
            assert anyio.run(send, px.bootstrap_servers, "alice", backend="trio") == expected
        assert "routes no records for User:carol" in caplog.text  # the operator hears why
        for secret in (USERS["alice"], USERS["bob"], "not-alice-pw"):
            assert secret not in caplog.text


async def _pipelined_login_then_produce(servers: str, topic: str) -> int:
    """Over a raw connection to ``servers``: bob's PLAIN login and, written
    before its answer, a second handshake and a login as alice with a wrong
    password; then a keyed Produce (acks=1). Returns the Produce's error code."""
    host, port = servers.rsplit(":", 1)
    reader = FrameReader()
    frames, correlation = b"", 0

    def frame(key: int, version: int, body: Any) -> bytes:
        nonlocal correlation
        correlation += 1
        header = RequestHeader(
            request_api_key=key,
            request_api_version=version,
            correlation_id=correlation,
            client_id="pipelined",
        )
        return protocol.encode_request(header, body)

    async def answer(stream: trio.SocketStream) -> bytes:
        while (got := reader.next_frame()) is None:
            data = await stream.receive_some(65536)
            assert data, "the proxy closed the connection"
            reader.feed(data)
        return got

    for user, password in (("bob", USERS["bob"]), ("alice", "not-alice-pw")):
        frames += frame(17, 1, hs.SaslHandshakeRequest(mechanism="PLAIN"))
        auth = sa.SaslAuthenticateRequest(auth_bytes=plain_message(user, password))
        frames += frame(36, 2, auth)
    with trio.fail_after(60):
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(frames)  # all four before any answer
            codes = []
            for key, version in ((17, 1), (36, 2), (17, 1), (36, 2)):
                codes.append(protocol.decode_response(await answer(stream), key, version)[1])
            assert codes[1].error_code == 0  # bob's login, the broker's only success
            assert codes[3].error_code != 0
            # The topic's leaders, as a client asks before it writes.
            topics = [md.MetadataRequest.MetadataRequestTopic(name=topic)]
            await stream.send_all(frame(3, 9, md.MetadataRequest(topics=topics)))
            await answer(stream)
            batch = encode_batch([(1_000, b"key-3", b"v", [])])
            produce = pm.ProduceRequest(
                acks=1,
                timeout_ms=10_000,
                topic_data=[
                    pm.ProduceRequest.TopicProduceData(
                        name=topic,
                        partition_data=[
                            pm.ProduceRequest.PartitionProduceData(index=0, records=batch)
                        ],
                    )
                ],
            )
            await stream.send_all(frame(0, 9, produce))
            body = protocol.decode_response(await answer(stream), 0, 9)[1]
            return int(body.responses[0].partition_responses[0].error_code)


async def _held_relay(
    broker: str,
    listening: trio.MemorySendChannel[int],
    *,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """A TCP relay to ``broker`` that holds the broker's answers on a connection
    whose first request is a SaslHandshake until four requests went through:
    the proxy has then seen (and watched) both logins before the first answer."""
    host, port = broker.rsplit(":", 1)

    async def relay(client: trio.SocketStream) -> None:
        upstream = await trio.open_tcp_stream(host, int(port))
        released = trio.Event()
        reader = FrameReader()
        count = 0

        async def forward() -> None:
            nonlocal count
            while data := await client.receive_some(65536):
                await upstream.send_all(data)
                reader.feed(data)
                while (got := reader.next_frame()) is not None:
                    count += 1
                    if (count == 1 and int.from_bytes(got[:2], "big") != 17) or count == 4:
                        released.set()

        async def back() -> None:
            first = await upstream.receive_some(65536)
            await released.wait()
            await client.send_all(first)
            while data := await upstream.receive_some(65536):
                await client.send_all(data)

        async with upstream, client, trio.open_nursery() as pipes:
            pipes.start_soon(forward)
            pipes.start_soon(back)

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    await listening.send(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(relay, listeners)


def test_a_login_written_before_the_last_ones_answer_does_not_rename_the_client(
    tmp_path: Path, credentials: str
) -> None:
    """A client that writes a second handshake and a login as another user before
    the broker answered its own login is routed as the user the broker accepted:
    Kafka answers a connection's requests in order, so the success answers the
    first login (bob, who may see the topic but not write), not alice's that the broker refused."""
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path / "b", **BROKER_SASL) as b:
        topic = fresh("sasl-pipelined")

        async def setup() -> None:
            with anyio.fail_after(60):
                await _create(b.bootstrap_servers, topic, as_user("admin"))
                await _grant(b.bootstrap_servers, topic, "alice", AclOperation.WRITE)
                await _grant(b.bootstrap_servers, topic, "bob", AclOperation.DESCRIBE)

        anyio.run(setup, backend="trio")

        async def attack() -> tuple[int, dict[str, int]]:
            with trio.fail_after(120):
                send, receive = trio.open_memory_channel[int](1)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_held_relay, b.bootstrap_servers, send)
                    relay = f"127.0.0.1:{await receive.receive()}"
                    async with serve_proxy(
                        upstream=(relay,), port=0, principal_credentials=credentials
                    ) as proxy:
                        code = await _pipelined_login_then_produce(proxy.bootstrap_servers, topic)
                        sasl = dict(proxy.statistics.sasl)
                    nursery.cancel_scope.cancel()
            return code, sasl

        code, sasl = trio.run(attack)
        assert code == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # bob's, not alice's, write
        assert sasl["routed"] == 1


def test_a_login_the_brokers_refuse_fails_the_parts_and_shows_no_secret(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The proxy's held login for alice is wrong: her client authenticates (to the
    broker, with her own password), and her routed records fail retriably
    (the error the proxy stands in for a part it could not write) with a
    reason, told to her and logged, that names no password."""
    path = tmp_path / "principals.json"
    held = "stale-held-password"
    path.write_text(
        json.dumps(
            {"User:alice": {"mechanism": "SCRAM-SHA-256", "username": "alice", "password": held}}
        )
    )
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path / "b", **BROKER_SASL) as b:
        topic = fresh("sasl-stale")

        async def go() -> None:
            with anyio.fail_after(60):
                await _create(b.bootstrap_servers, topic, as_user("admin"))
                await _grant(b.bootstrap_servers, topic, "alice", AclOperation.WRITE)
                async with open_producer(
                    bootstrap_servers=px.bootstrap_servers, enable_idempotence=False, retries=0,
                    **as_user("alice", "SCRAM-SHA-256"),
                ) as producer:  # fmt: skip
                    with pytest.raises(Exception) as failed:
                        await producer.send_and_wait(topic, b"v", key=b"k")
                retriable = (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT)
            assert getattr(failed.value, "code", None) in retriable
            assert "refused the proxy's SCRAM-SHA-256 login" in str(failed.value)

        upstream = (b.bootstrap_servers,)
        with proxy_in_thread(upstream=upstream, port=0, principal_credentials=str(path)) as px:
            anyio.run(go, backend="trio")
            sasl = px.statistics.sasl
            assert sasl["routed"] >= 1 and "logins" not in sasl  # no login succeeded
    assert "refused the proxy's SCRAM-SHA-256 login for 'alice'" in caplog.text
    assert held not in caplog.text and USERS["alice"] not in caplog.text


def test_command_line_reports_a_bad_credentials_file(tmp_path: Path) -> None:
    """Found by the configuration's check, before anything starts: a start is
    refused as a usage error (exit 2), ``--check-config`` answers 1."""
    bad = tmp_path / "principals.json"
    bad.write_text(json.dumps({"User:x": {"mechanism": "PLAIN", "username": "x"}}))
    missing = tmp_path / "missing.json"
    for path, says in ((bad, "needs a password"), (missing, f"the file {missing} does not exist")):
        for check, code in (((), 2), (("--check-config",), 1)):
            run = subprocess.run(
                [
                    sys.executable, "-m", "trafka.tools.cli", "proxy", "--upstream", "127.0.0.1:1",
                    "--listen", "127.0.0.1:0", "--principal-credentials", str(path), *check,
                ],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert run.returncode == code, run.stderr
            assert says in run.stderr and "Traceback" not in run.stderr


def test_oauthbearer_clients_are_routed_as_their_token_subject(tmp_path: Path) -> None:
    """librdkafka with an unsecured JWT (KIP-255's ``sub`` claim as principal)
    through the proxy: its plain producer's requests go over the pool that logs
    in as ``User:dave`` (the proxy holds a PLAIN login for dave), and its keyed
    records land on their murmur2 partitions."""
    path = tmp_path / "principals.json"
    path.write_text(
        json.dumps({"User:dave": {"mechanism": "PLAIN", "username": "dave", "password": "dave-pw"}})
    )
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path / "b",
        security_protocol="SASL_PLAINTEXT",
        sasl_enabled_mechanisms="OAUTHBEARER,PLAIN",
        sasl_users="dave:dave-pw",
    ) as b:
        topic = fresh("sasl-oauth")

        async def setup() -> None:
            with anyio.fail_after(60):
                await _create(b.bootstrap_servers, topic, dave)

        dave = {**as_user("bob"), "sasl_username": "dave", "sasl_password": "dave-pw"}
        anyio.run(setup, backend="trio")
        upstream = (b.bootstrap_servers,)
        with proxy_in_thread(upstream=upstream, port=0, principal_credentials=str(path)) as px:
            producer = confluent_kafka.Producer(
                {
                    "bootstrap.servers": px.bootstrap_servers,
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanisms": "OAUTHBEARER",
                    "enable.sasl.oauthbearer.unsecure.jwt": True,
                    "sasl.oauthbearer.config": "principal=dave",
                    "enable.idempotence": False,
                    "partitioner": "consistent_random",
                    "linger.ms": 20,
                }
            )
            failures: list[Any] = []
            for i in range(200):
                producer.produce(
                    topic,
                    value=b"o-%d" % i,
                    key=b"key-%d" % (i % KEYS),
                    on_delivery=lambda err, _msg: failures.append(err) if err else None,
                )
            assert producer.flush(60) == 0 and failures == []
            sasl, routing = px.statistics.sasl, px.statistics.routing
            assert sasl["routed"] >= 1 and sasl["logins"] >= 1 and "unrouted" not in sasl
            assert routing.requests_pooled > 0
        _check(placement(b.bootstrap_servers, topic, PARTITIONS, **dave), 200, b"o")
