"""Delegation tokens (KIP-48) end to end: trafka's admin creates, renews, expires
and describes tokens on a real brokerlite, and trafka's producer, consumer group
and admin log in with them over SCRAM (``sasl_scram_tokenauth`` or Java's JAAS
form) as the token's owner, whose ACLs they then have; refusals reach the
caller as Kafka's error codes; TLS decides who may ask for tokens.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import trustme
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.sdk import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    DelegationToken,
    NewTopic,
    PatternType,
    open_admin,
    open_consumer,
    open_producer,
)
from trafka.sdk.blocking import Admin as BlockingAdmin
from trafka.sdk.errors import AuthenticationError, ConfigError

pytestmark = [pytest.mark.timeout(120), pytest.mark.anyio]

USERS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw", "admin": "admin-pw"}
SECRET = "sdk-token-secret"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def as_user(user: str, mechanism: str = "SCRAM-SHA-256") -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_username": user,
        "sasl_password": USERS[user],
    }


def with_token(token: DelegationToken, mechanism: str = "SCRAM-SHA-256") -> dict[str, Any]:
    return {"security_protocol": "SASL_PLAINTEXT", **token.client_settings(mechanism)}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(
        tmp_path_factory,
        "tokens",
        security_protocol="SASL_PLAINTEXT",
        sasl_users=USERS,
        delegation_token_secret_key=SECRET,
    )


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(
        tmp_path_factory,
        "token-reauth",
        security_protocol="SASL_PLAINTEXT",
        sasl_users=USERS,
        delegation_token_secret_key=SECRET,
        # Renewed at 85-95% (KIP-368): 200-600 ms of slack for a loaded machine.
        connections_max_reauth_ms=4000,
    )


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(
        tmp_path_factory,
        "token-acls",
        security_protocol="SASL_PLAINTEXT",
        sasl_users=USERS,
        delegation_token_secret_key=SECRET,
        authorizer_class_name=AUTHORIZER,
        super_users="User:admin",
    )


@pytest.fixture(scope="module")
def no_secret_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(
        tmp_path_factory, "no-secret", security_protocol="SASL_PLAINTEXT", sasl_users=USERS
    )


@pytest.fixture(scope="module")
def plaintext_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "plaintext", delegation_token_secret_key=SECRET)


@pytest.fixture(scope="module")
def tls_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningBroker, trustme.CA]]:
    """An SSL listener that asks for client certificates but does not require them."""
    ca = trustme.CA()
    folder = tmp_path_factory.mktemp("token-tls")
    server = ca.issue_cert("127.0.0.1")
    paths = {n: str(folder / f"{n}.pem") for n in ("ca", "cert", "key")}
    ca.cert_pem.write_to_path(paths["ca"])
    server.cert_chain_pems[0].write_to_path(paths["cert"])
    server.private_key_pem.write_to_path(paths["key"])
    for running in module_broker(
        tmp_path_factory,
        "token-tls-data",
        security_protocol="SSL",
        ssl_certfile=paths["cert"],
        ssl_keyfile=paths["key"],
        ssl_cafile=paths["ca"],
        ssl_client_auth="requested",
        delegation_token_secret_key=SECRET,
    ):
        yield running, ca


async def new_token(bs: str, user: str = "alice", **options: Any) -> DelegationToken:
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bs, **as_user(user)) as admin:
            return await admin.create_delegation_token(**options)


def ids(tokens: list[DelegationToken]) -> set[str]:
    return {t.token_info.token_id for t in tokens}


async def logs_in(bs: str, settings: dict[str, Any]) -> bool:
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bs, **settings) as admin:
            try:
                await admin.list_topics()
            except AuthenticationError as exc:
                assert exc.code == ErrorCode.SASL_AUTHENTICATION_FAILED
                return False
            return True


@pytest.mark.parametrize("anyio_backend", ["trio", "asyncio"])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_a_token_produces_and_consumes_in_a_group_as_its_owner(
    broker: RunningBroker, mechanism: str, anyio_backend: str
) -> None:
    bs = broker.bootstrap_servers
    token = await new_token(bs)
    info = token.token_info
    assert (info.owner, info.token_requester, info.renewers) == ("User:alice", "User:alice", ())
    assert info.issue_timestamp_ms < info.expiry_timestamp_ms < info.max_timestamp_ms
    assert "hmac" not in repr(token).replace("hmac_base64", "")  # the secret stays out
    topic, group = fresh("tok"), fresh("tok-group")
    settings = with_token(token, mechanism)
    with anyio.fail_after(60):
        async with open_producer(bootstrap_servers=bs, **settings) as producer:
            for i in range(10):
                await producer.send(topic, f"v{i}".encode())
        async with open_consumer(
            topic,
            bootstrap_servers=bs,
            group_id=group,
            auto_offset_reset="earliest",
            **settings,
        ) as consumer:
            values = []
            async for record in consumer:
                values.append(record.value)
                if len(values) == 10:
                    break
            await consumer.commit()
    assert values == [f"v{i}".encode() for i in range(10)]
    # The commit counted for the group, read back by alice herself.
    async with open_admin(bootstrap_servers=bs, **as_user("alice")) as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    assert list(offsets.values()) == [10]


async def test_javas_jaas_form_logs_in_with_a_token_too(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    token = await new_token(bs)
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{token.token_info.token_id}" password="{token.hmac_base64}" '
        'tokenauth="true";'
    )
    settings = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_jaas_config": jaas,
    }
    assert await logs_in(bs, settings)
    # Without tokenauth the token id is just an unknown user.
    assert not await logs_in(bs, {**settings, "sasl_jaas_config": jaas.replace("true", "false")})


def test_tokenauth_needs_a_scram_mechanism() -> None:
    from trafka.sdk import ClientConfig

    with pytest.raises(ConfigError, match="SCRAM"):
        ClientConfig(
            security_protocol="sasl_plaintext",
            sasl_mechanism="PLAIN",
            sasl_username="id",
            sasl_password="hmac",
            sasl_scram_tokenauth=True,
        )


async def test_renew_expire_and_describe_as_kafka_answers_them(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    token = await new_token(bs, renewers=["bob"], max_lifetime_ms=3_600_000)
    other = await new_token(bs, "carol")
    info = token.token_info
    assert info.renewers == ("User:bob",)
    assert info.max_timestamp_ms - info.issue_timestamp_ms == 3_600_000
    with anyio.fail_after(60):
        async with (
            open_admin(bootstrap_servers=bs, **as_user("alice")) as alice,
            open_admin(bootstrap_servers=bs, **as_user("bob")) as bob,
            open_admin(bootstrap_servers=bs, **as_user("carol")) as carol,
        ):
            [mine] = [
                t
                for t in await alice.describe_delegation_tokens(["User:alice"])
                if t.token_info.token_id == info.token_id
            ]
            assert mine.hmac == token.hmac and mine.token_info == info
            assert other.token_info.token_id not in ids(
                await alice.describe_delegation_tokens(["User:alice"])
            )
            assert await alice.describe_delegation_tokens([]) == []
            # Without an authorizer everyone may describe every token (as Kafka).
            every = ids(await carol.describe_delegation_tokens())
            assert {info.token_id, other.token_info.token_id} <= every

            expiry = await bob.renew_delegation_token(token.hmac, renew_period_ms=60_000)
            assert info.issue_timestamp_ms < expiry <= info.max_timestamp_ms
            [renewed] = [
                t
                for t in await alice.describe_delegation_tokens(["alice"])
                if t.token_info.token_id == info.token_id
            ]
            assert renewed.token_info.expiry_timestamp_ms == expiry
            with pytest.raises(KafkaError) as refused:
                await carol.renew_delegation_token(token.hmac)
            assert refused.value.code == ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
            with pytest.raises(KafkaError) as missing:
                await alice.expire_delegation_token(b"\x00" * 64)
            assert missing.value.code == ErrorCode.DELEGATION_TOKEN_NOT_FOUND

            assert await logs_in(bs, with_token(token))
            # the moment it ended (as Kafka 3.9 answers), not the period asked
            assert await alice.expire_delegation_token(token.hmac) >= info.issue_timestamp_ms
            assert not await logs_in(bs, with_token(token))
            assert info.token_id not in ids(await alice.describe_delegation_tokens(["alice"]))
            assert await logs_in(bs, with_token(other))


async def test_a_token_login_may_not_ask_for_tokens(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    token = await new_token(bs)
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bs, **with_token(token)) as admin:
            for call in (
                admin.create_delegation_token(),
                admin.describe_delegation_tokens(),
                admin.renew_delegation_token(token.hmac),
            ):
                with pytest.raises(KafkaError) as refused:
                    await call
                assert refused.value.code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED


async def test_a_token_session_re_authenticates_and_keeps_working(
    reauth_broker: RunningBroker,
) -> None:
    """With connections.max.reauth.ms, a client logged in with a token logs in
    again on its connection (KIP-368) as the same owner, and keeps producing."""
    bs = reauth_broker.bootstrap_servers
    token = await new_token(bs)
    topic = fresh("tok-reauth")
    connections = reauth_broker.broker.connections
    before = connections.sasl_reauthentications
    with anyio.fail_after(60):
        async with open_producer(bootstrap_servers=bs, **with_token(token)) as producer:
            offsets: list[int] = []
            renewed = None  # records sent before the broker counted a re-authentication
            # Records until the session was renewed (not for a fixed time), and a few after.
            while renewed is None or len(offsets) < renewed + 3:
                sent = await producer.send_and_wait(topic, b"x%d" % len(offsets))
                offsets.append(sent.offset)
                if renewed is None and connections.sasl_reauthentications > before:
                    renewed = len(offsets)
                await anyio.sleep(0.2)
    assert offsets == list(range(len(offsets)))


async def test_tokens_act_with_their_owners_acls(acl_broker: RunningBroker) -> None:
    if True:
        bs = acl_broker.bootstrap_servers
        ours, theirs = fresh("alice-topic"), fresh("carol-topic")
        with anyio.fail_after(60):
            async with open_admin(bootstrap_servers=bs, **as_user("admin")) as admin:
                await admin.create_topics([NewTopic(ours, 1), NewTopic(theirs, 1)])
                await admin.create_acls(
                    [
                        AclBinding(
                            AclResourceType.TOPIC,
                            ours,
                            PatternType.LITERAL,
                            "User:alice",
                            "*",
                            operation,
                            AclPermissionType.ALLOW,
                        )
                        for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)
                    ]
                    + [
                        AclBinding(
                            AclResourceType.USER,
                            "User:carol",
                            PatternType.LITERAL,
                            "User:alice",
                            "*",
                            AclOperation.CREATE_TOKENS,
                            AclPermissionType.ALLOW,
                        )
                    ]
                )
            token = await new_token(bs)
            async with open_producer(
                bootstrap_servers=bs, max_block_ms=3000, **with_token(token)
            ) as producer:
                assert (await producer.send_and_wait(ours, b"ok")).offset == 0
                with pytest.raises(KafkaError) as denied:
                    await producer.send_and_wait(theirs, b"no")
                assert denied.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            # A token alice made for carol acts as carol: not allowed on alice's topic.
            carols = await new_token(bs, owner="User:carol")
            assert carols.token_info.owner == "User:carol"
            assert carols.token_info.token_requester == "User:alice"
            async with open_producer(
                bootstrap_servers=bs, max_block_ms=3000, **with_token(carols)
            ) as producer:
                with pytest.raises(KafkaError) as denied:
                    await producer.send_and_wait(ours, b"no")
                assert denied.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            with pytest.raises(KafkaError) as refused:
                await new_token(bs, "bob", owner="User:carol")
            assert refused.value.code == ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED


async def test_tokens_are_off_without_a_secret_and_on_plaintext(
    no_secret_broker: RunningBroker, plaintext_broker: RunningBroker
) -> None:
    with pytest.raises(KafkaError) as disabled:
        await new_token(no_secret_broker.bootstrap_servers)
    assert disabled.value.code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=plaintext_broker.bootstrap_servers) as admin:
            with pytest.raises(KafkaError) as refused:
                await admin.create_delegation_token()
    assert refused.value.code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED


async def test_over_ssl_only_a_client_certificate_may_ask(
    tls_broker: tuple[RunningBroker, trustme.CA],
) -> None:
    running, ca = tls_broker
    bs = running.bootstrap_servers
    anonymous_context = ssl.create_default_context()
    ca.configure_trust(anonymous_context)
    with_cert = ssl.create_default_context()
    ca.configure_trust(with_cert)
    ca.issue_cert("svc.example").configure_cert(with_cert)
    with anyio.fail_after(30):
        async with open_admin(
            bootstrap_servers=bs, security_protocol="ssl", ssl_context=anonymous_context
        ) as anonymous:
            with pytest.raises(KafkaError) as refused:
                await anonymous.create_delegation_token()
            assert refused.value.code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        async with open_admin(
            bootstrap_servers=bs, security_protocol="ssl", ssl_context=with_cert
        ) as identified:
            token = await identified.create_delegation_token()
    # Owned by the certificate's subject, as Kafka's default principal builder names it.
    assert token.token_info.owner.startswith("User:") and "trustme" in token.token_info.owner


def test_the_blocking_admin_manages_tokens(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    with BlockingAdmin(bootstrap_servers=bs, **as_user("bob")) as admin:
        token = admin.create_delegation_token(renewers=["User:alice"])
        assert token.token_info.owner == "User:bob"
        ids = [t.token_info.token_id for t in admin.describe_delegation_tokens(["bob"])]
        assert token.token_info.token_id in ids
        # the moment it ended (as Kafka 3.9 answers), not the period asked
        assert admin.expire_delegation_token(token.hmac) >= token.token_info.issue_timestamp_ms
