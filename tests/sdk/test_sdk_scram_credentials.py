"""Users' SCRAM credentials through the admin API (KIP-554) against brokerlite.

trafka's ``describe_user_scram_credentials`` and ``alter_user_scram_credentials``
(and the blocking client's), confluent-kafka's and kafka-python's: a password
set through the API logs in at once on new SCRAM-SHA-256 and SCRAM-SHA-512
connections (trafka and librdkafka as the peers), a deleted one no more, the
broker's refusals reach the caller as Kafka's error codes, and the changes
outlive a restart of the broker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.codec import ErrorCode, KafkaError
from trafka.sdk import (
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
    open_admin,
)
from trafka.sdk.errors import AuthenticationError

pytestmark = pytest.mark.timeout(120)

USERS = {"admin": "admin-pw", "cfg": "cfg-pw"}
SASL = {"security_protocol": "SASL_PLAINTEXT", "sasl_users": USERS}
SCRAM = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def as_user(user: str, password: str, mechanism: str = "PLAIN") -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_username": user,
        "sasl_password": password,
    }


ADMIN = as_user("admin", USERS["admin"])


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "scram-admin", **SASL)


async def logs_in(bs: str, mechanism: str, user: str, password: str) -> bool:
    """Whether a new trafka connection authenticates as ``user`` with ``password``."""
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bs, **as_user(user, password, mechanism)) as c:
            try:
                await c.list_topics()
            except AuthenticationError as exc:
                assert exc.code == ErrorCode.SASL_AUTHENTICATION_FAILED
                return False
            return True


def librdkafka_logs_in(bs: str, mechanism: str, user: str, password: str) -> bool:
    """Whether a new librdkafka connection authenticates (its error callback tells
    an authentication failure; a listing that comes back is a success)."""
    from confluent_kafka import KafkaError as CKError
    from confluent_kafka import KafkaException, Producer

    errors: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": bs,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            "error_cb": errors.append,
        }
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        producer.poll(0.1)  # serves error_cb
        if any(e.code() == CKError._AUTHENTICATION for e in errors):
            return False
        try:
            producer.list_topics(timeout=1)
        except KafkaException:
            continue
        return True
    raise AssertionError(f"librdkafka neither authenticated nor failed: {errors}")


async def alter(bs: str, *changes: Any) -> None:
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bs, **ADMIN) as admin:
            await admin.alter_user_scram_credentials(changes)


async def describe(bs: str, users: list[str] | None = None) -> dict[str, Any]:
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bs, **ADMIN) as admin:
            return await admin.describe_user_scram_credentials(users)


@pytest.mark.parametrize("mechanism", SCRAM)
def test_a_password_set_through_the_admin_logs_in_until_it_is_deleted(
    broker: RunningBroker, mechanism: str
) -> None:
    bs, user = broker.bootstrap_servers, fresh("user")
    other = SCRAM[1 - SCRAM.index(mechanism)]

    async def set_it() -> None:
        assert not await logs_in(bs, mechanism, user, "s3cret")
        await alter(bs, UserScramCredentialUpsertion(user, "s3cret", mechanism, iterations=8192))
        assert await describe(bs, [user]) == {
            user: UserScramCredentialsDescription(user, (ScramCredentialInfo(mechanism, 8192),))
        }
        assert await logs_in(bs, mechanism, user, "s3cret")
        assert not await logs_in(bs, mechanism, user, "wrong")
        assert not await logs_in(bs, other, user, "s3cret")
        assert not await logs_in(bs, "PLAIN", user, "s3cret")

    anyio.run(set_it, backend="trio")
    assert librdkafka_logs_in(bs, mechanism, user, "s3cret")
    assert not librdkafka_logs_in(bs, mechanism, user, "wrong")

    async def delete_it() -> None:
        await alter(bs, UserScramCredentialDeletion(user, mechanism))
        assert not await logs_in(bs, mechanism, user, "s3cret")
        with pytest.raises(KafkaError) as caught:
            await describe(bs, [user])
        assert caught.value.code == ErrorCode.RESOURCE_NOT_FOUND
        assert user in str(caught.value)

    anyio.run(delete_it, backend="trio")
    assert not librdkafka_logs_in(bs, mechanism, user, "s3cret")


def test_refusals_are_kafka_errors_per_user_and_the_others_go_through(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    good, weak, twice, missing = (fresh(n) for n in ("good", "weak", "twice", "missing"))

    async def main() -> None:
        with anyio.fail_after(60):
            async with open_admin(bootstrap_servers=bs, **ADMIN) as admin:
                with pytest.raises(KafkaError) as caught:
                    await admin.alter_user_scram_credentials(
                        [
                            UserScramCredentialUpsertion(good, "pw"),
                            UserScramCredentialUpsertion(weak, "pw", iterations=1000),
                            UserScramCredentialUpsertion(twice, "pw", "SCRAM-SHA-256"),
                            UserScramCredentialUpsertion(twice, "pw", "SCRAM-SHA-512"),
                            UserScramCredentialDeletion(missing, "SCRAM-SHA-512"),
                        ]
                    )
                # The first user that failed, in the order given.
                assert caught.value.code == ErrorCode.UNACCEPTABLE_CREDENTIAL
                assert weak in str(caught.value)
                for change, code in [
                    (UserScramCredentialUpsertion(twice, "pw"), None),
                    (UserScramCredentialDeletion(missing), ErrorCode.RESOURCE_NOT_FOUND),
                    (UserScramCredentialUpsertion("", "pw"), ErrorCode.UNACCEPTABLE_CREDENTIAL),
                    (
                        UserScramCredentialUpsertion(good, "pw", iterations=16385),
                        ErrorCode.UNACCEPTABLE_CREDENTIAL,
                    ),
                ]:
                    if code is None:
                        await admin.alter_user_scram_credentials([change])
                        continue
                    with pytest.raises(KafkaError) as refused:
                        await admin.alter_user_scram_credentials([change])
                    assert refused.value.code == code, change
                found = await admin.describe_user_scram_credentials([good, twice])
                assert [d.credential_infos for d in found.values()] == [
                    (ScramCredentialInfo("SCRAM-SHA-256", 4096),)
                ] * 2
                assert await admin.describe_user_scram_credentials([]) == {}
                everyone = await admin.describe_user_scram_credentials()
                assert {good, twice, "admin", "cfg"} <= set(everyone)
                assert weak not in everyone and missing not in everyone
                assert everyone["cfg"].credential_infos == (
                    ScramCredentialInfo("SCRAM-SHA-256", 4096),
                    ScramCredentialInfo("SCRAM-SHA-512", 4096),
                )
                with pytest.raises(KafkaError) as unknown:
                    await admin.describe_user_scram_credentials([good, missing])
                assert unknown.value.code == ErrorCode.RESOURCE_NOT_FOUND
                with pytest.raises(ValueError, match="unknown SCRAM mechanism"):
                    await admin.alter_user_scram_credentials(
                        [UserScramCredentialUpsertion(good, "pw", "SCRAM-SHA-1")]
                    )

    anyio.run(main, backend="trio")


def test_the_blocking_admin_forwards_both_calls(broker: RunningBroker) -> None:
    from trafka.sdk.blocking import Admin

    bs, user = broker.bootstrap_servers, fresh("blocking")
    with Admin(bootstrap_servers=bs, **ADMIN) as admin:
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, "pw", "SCRAM-SHA-512", iterations=4200)]
        )
        found = admin.describe_user_scram_credentials([user])
        assert found[user].credential_infos == (ScramCredentialInfo("SCRAM-SHA-512", 4200),)
        admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, "SCRAM-SHA-512")])
        with pytest.raises(KafkaError) as caught:
            admin.describe_user_scram_credentials([user])
        assert caught.value.code == ErrorCode.RESOURCE_NOT_FOUND


def test_changes_outlive_a_restart_and_beat_the_configuration(tmp_path: Path) -> None:
    data = tmp_path / "data"
    settings: dict[str, Any] = {"port": 0, "host": "127.0.0.1", "data_dir": data, **SASL}
    with broker_in_thread(**settings) as first:
        bs = first.bootstrap_servers
        anyio.run(
            alter,
            bs,
            UserScramCredentialUpsertion("dave", "dave-pw", "SCRAM-SHA-512"),
            UserScramCredentialUpsertion("cfg", "changed", "SCRAM-SHA-256"),
            backend="trio",
        )
        anyio.run(alter, bs, UserScramCredentialDeletion("cfg", "SCRAM-SHA-512"), backend="trio")
        before = anyio.run(describe, bs, backend="trio")

    with broker_in_thread(**settings) as second:
        bs = second.bootstrap_servers

        async def check() -> None:
            assert await describe(bs) == before
            assert before["cfg"].credential_infos == (ScramCredentialInfo("SCRAM-SHA-256", 4096),)
            assert await logs_in(bs, "SCRAM-SHA-512", "dave", "dave-pw")
            assert await logs_in(bs, "SCRAM-SHA-256", "cfg", "changed")
            assert not await logs_in(bs, "SCRAM-SHA-256", "cfg", USERS["cfg"])
            assert not await logs_in(bs, "SCRAM-SHA-512", "cfg", USERS["cfg"])  # deleted
            assert await logs_in(bs, "PLAIN", "cfg", USERS["cfg"])  # PLAIN: the config's

        anyio.run(check, backend="trio")
        assert librdkafka_logs_in(bs, "SCRAM-SHA-512", "dave", "dave-pw")
        assert not librdkafka_logs_in(bs, "SCRAM-SHA-512", "cfg", USERS["cfg"])


# -- other clients' admin APIs -------------------------------------------------------------


def test_confluent_kafka_describes_and_alters_credentials(broker: RunningBroker) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import ScramCredentialInfo as CInfo
    from confluent_kafka.admin import ScramMechanism as CMechanism
    from confluent_kafka.admin import UserScramCredentialDeletion as CDeletion
    from confluent_kafka.admin import UserScramCredentialUpsertion as CUpsertion

    bs, user, weak = broker.bootstrap_servers, fresh("cf"), fresh("cf-weak")
    admin = AdminClient(
        {
            "bootstrap.servers": bs,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": USERS["admin"],
        }
    )
    futures = admin.alter_user_scram_credentials(
        [
            CUpsertion(user, CInfo(CMechanism.SCRAM_SHA_512, 10000), b"cf-pw"),
            CUpsertion(weak, CInfo(CMechanism.SCRAM_SHA_256, 100), b"cf-pw"),
        ],
        request_timeout=30,
    )
    assert futures[user].result(timeout=30) is None
    with pytest.raises(KafkaException) as caught:
        futures[weak].result(timeout=30)
    assert caught.value.args[0].code() == ErrorCode.UNACCEPTABLE_CREDENTIAL

    described = admin.describe_user_scram_credentials([user, weak], request_timeout=30)
    info = described[user].result(timeout=30).scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in info] == [(CMechanism.SCRAM_SHA_512, 10000)]
    with pytest.raises(KafkaException) as missing:
        described[weak].result(timeout=30)
    assert missing.value.args[0].code() == ErrorCode.RESOURCE_NOT_FOUND
    everyone = admin.describe_user_scram_credentials(request_timeout=30).result(timeout=30)
    assert {user, "admin", "cfg"} <= set(everyone) and weak not in everyone

    # What librdkafka salted logs in with trafka and librdkafka alike.
    assert anyio.run(logs_in, bs, "SCRAM-SHA-512", user, "cf-pw", backend="trio")
    assert librdkafka_logs_in(bs, "SCRAM-SHA-512", user, "cf-pw")

    deleted = admin.alter_user_scram_credentials(
        [CDeletion(user, CMechanism.SCRAM_SHA_512)], request_timeout=30
    )
    assert deleted[user].result(timeout=30) is None
    again = admin.alter_user_scram_credentials(
        [CDeletion(user, CMechanism.SCRAM_SHA_512)], request_timeout=30
    )
    with pytest.raises(KafkaException) as gone:
        again[user].result(timeout=30)
    assert gone.value.args[0].code() == ErrorCode.RESOURCE_NOT_FOUND
    assert not librdkafka_logs_in(bs, "SCRAM-SHA-512", user, "cf-pw")


def test_kafka_python_describes_and_alters_credentials(broker: RunningBroker) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import ScramMechanism as KMechanism
    from kafka.admin import UserScramCredentialDeletion as KDeletion
    from kafka.admin import UserScramCredentialUpsertion as KUpsertion

    bs, user = broker.bootstrap_servers, fresh("kp")
    admin = KafkaAdminClient(
        bootstrap_servers=bs,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="admin",
        sasl_plain_password=USERS["admin"],
    )
    try:
        result = admin.alter_user_scram_credentials(
            [KUpsertion(user, KMechanism.SCRAM_SHA_256, "kp-pw", iterations=4100)]
        )
        assert result == {user: None}
        assert admin.describe_user_scram_credentials([user]) == {
            user: {
                "error": None,
                "credential_infos": [{"mechanism": KMechanism.SCRAM_SHA_256, "iterations": 4100}],
            }
        }
        assert anyio.run(logs_in, bs, "SCRAM-SHA-256", user, "kp-pw", backend="trio")
        assert admin.alter_user_scram_credentials([KDeletion(user, "SCRAM-SHA-256")]) == {
            user: None
        }
        refused = admin.alter_user_scram_credentials([KDeletion(user, "SCRAM-SHA-256")])
        assert refused[user]  # the broker's message: nothing to delete
        missing = admin.describe_user_scram_credentials([user])
        assert missing[user]["error"] and missing[user]["credential_infos"] == []
        assert not anyio.run(logs_in, bs, "SCRAM-SHA-256", user, "kp-pw", backend="trio")
    finally:
        admin.close()
