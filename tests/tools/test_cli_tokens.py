"""``trafka tokens`` against a SASL brokerlite with delegation tokens on: a token
the CLI creates logs in over SCRAM, is listed by ``describe`` (its HMAC only on
request), renews to a new expiry and, once expired, neither logs in nor is
listed; the broker's refusals exit 1 naming Kafka's error, bad input exits 2."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner, Result

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.sdk import open_admin
from trafka.sdk.errors import AuthenticationError
from trafka.tools.cli import main
from trafka.tools.cli_tokens import format_time

pytestmark = pytest.mark.timeout(120)

USERS = {"admin": "admin-pw", "bob": "bob-pw", "carol": "carol-pw"}


def as_user(user: str) -> list[str]:
    return [
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        "sasl.mechanism=PLAIN",
        "-X",
        f"sasl.username={user}",
        "-X",
        f"sasl.password={USERS[user]}",
    ]


def start(data: Path, **settings: object) -> contextlib.AbstractContextManager[RunningBroker]:
    return broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=data,
        security_protocol="SASL_PLAINTEXT",
        sasl_users=USERS,
        **settings,
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    with start(
        tmp_path_factory.mktemp("cli-tokens"), delegation_token_secret_key="token-secret"
    ) as running:
        yield running


def tokens(
    broker: RunningBroker, *args: str, user: str = "admin", input: str | None = None
) -> Result:
    return CliRunner().invoke(
        main, ["tokens", *args, "-b", broker.bootstrap_servers, *as_user(user)], input=input
    )


def create(broker: RunningBroker, *args: str, user: str = "admin") -> dict[str, object]:
    done = tokens(broker, "create", "--json", *args, user=user)
    assert done.exit_code == 0, done.output
    created: dict[str, object] = json.loads(done.stdout)
    return created


def describe(broker: RunningBroker, *args: str, user: str = "admin") -> list[dict[str, object]]:
    done = tokens(broker, "describe", "--json", *args, user=user)
    assert done.exit_code == 0, done.output
    found: list[dict[str, object]] = json.loads(done.stdout)
    return found


def ms(value: object) -> int:
    assert isinstance(value, int), value
    return value


def logs_in(broker: RunningBroker, token_id: str, hmac_b64: str) -> bool:
    async def attempt() -> bool:
        with anyio.fail_after(30):
            async with open_admin(
                bootstrap_servers=broker.bootstrap_servers,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-256",
                sasl_username=token_id,
                sasl_password=hmac_b64,
                sasl_scram_tokenauth=True,
            ) as admin:
                try:
                    await admin.list_topics()
                except AuthenticationError:
                    return False
                return True

    return anyio.run(attempt, backend="trio")


def test_create_prints_the_token_and_it_logs_in(broker: RunningBroker) -> None:
    done = tokens(broker, "create", "--renewer", "User:bob", "--renewer", "carol")
    assert done.exit_code == 0, done.output
    fields = dict(line.split(":", 1) for line in done.stdout.splitlines())
    fields = {k: v.strip() for k, v in fields.items()}
    assert set(fields) == {
        "token id",
        "hmac",
        "owner",
        "requester",
        "renewers",
        "issued",
        "expires",
        "max",
    }
    assert fields["owner"] == fields["requester"] == "User:admin"
    assert fields["renewers"] == "User:bob,User:carol"  # a bare name is a User
    assert fields["expires"].endswith("Z") and fields["issued"] <= fields["expires"]
    assert "secret" in done.stderr
    assert len(base64.b64decode(fields["hmac"], validate=True)) == 64  # HMAC-SHA512
    assert logs_in(broker, fields["token id"], fields["hmac"])
    assert not logs_in(broker, fields["token id"], base64.b64encode(b"x" * 64).decode())

    listed = describe(broker)
    mine = [t for t in listed if t["token_id"] == fields["token id"]]
    assert len(mine) == 1 and "hmac" not in mine[0]
    assert mine[0]["renewers"] == ["User:bob", "User:carol"]
    assert format_time(ms(mine[0]["expiry_timestamp_ms"])) == fields["expires"]


def test_json_describe_table_and_show_hmac(broker: RunningBroker) -> None:
    created = create(broker, "--renewer", "User:bob", "--max-life-time-period", "3600000")
    assert set(created) == {
        "token_id",
        "hmac",
        "owner",
        "token_requester",
        "renewers",
        "issue_timestamp_ms",
        "expiry_timestamp_ms",
        "max_timestamp_ms",
    }
    issued, most = ms(created["issue_timestamp_ms"]), ms(created["max_timestamp_ms"])
    assert most - issued == 3_600_000  # the asked lifetime, under the broker's cap
    token_id, hmac = str(created["token_id"]), str(created["hmac"])

    table = tokens(broker, "describe")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        "TOKEN-ID",
        "OWNER",
        "REQUESTER",
        "RENEWERS",
        "ISSUED",
        "EXPIRES",
        "MAX",
    ]
    row = next(line.split() for line in lines[1:] if line.startswith(token_id))
    assert row == [
        token_id,
        "User:admin",
        "User:admin",
        "User:bob",
        format_time(issued),
        format_time(ms(created["expiry_timestamp_ms"])),
        format_time(most),
    ]
    assert hmac not in table.output

    shown = tokens(broker, "describe", "--show-hmac")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines()[0].split()[:2] == ["TOKEN-ID", "HMAC"]
    assert any(line.split()[:2] == [token_id, hmac] for line in shown.stdout.splitlines())
    with_hmac = describe(broker, "--show-hmac")
    assert {"token_id": token_id, "hmac": hmac}.items() <= next(
        t for t in with_hmac if t["token_id"] == token_id
    ).items()

    # bob, a renewer, sees it (without an authorizer, as on Kafka, so would anyone).
    assert token_id in {t["token_id"] for t in describe(broker, user="bob")}
    # Owner filters match owners, requesters and renewers.
    assert token_id in {t["token_id"] for t in describe(broker, "--owner-principal", "User:admin")}
    assert token_id in {t["token_id"] for t in describe(broker, "--owner", "bob")}
    nothing = tokens(broker, "describe", "--owner-principal", "User:nobody")
    assert nothing.exit_code == 0 and nothing.stdout == ""
    assert "no delegation tokens of those owners" in nothing.stderr


def test_renew_moves_the_expiry(broker: RunningBroker) -> None:
    created = create(broker, "--renewer", "User:bob")
    hmac = str(created["hmac"])
    first = ms(created["expiry_timestamp_ms"])

    # A short period brings the expiry earlier than the broker's default day.
    renewed = tokens(broker, "renew", "--hmac", hmac, "--renew-time-period", "60000", "--json")
    assert renewed.exit_code == 0, renewed.output
    shorter = json.loads(renewed.stdout)["expiry_timestamp_ms"]
    assert shorter < first
    described = next(t for t in describe(broker) if t["token_id"] == created["token_id"])
    assert described["expiry_timestamp_ms"] == shorter

    # A renewer may renew, reading the HMAC from stdin; it is never echoed.
    again = tokens(broker, "renew", "--hmac-stdin", user="bob", input=f"{hmac}\n")
    assert again.exit_code == 0, again.output
    assert hmac not in again.output
    later = next(t for t in describe(broker) if t["token_id"] == created["token_id"])
    assert ms(later["expiry_timestamp_ms"]) > shorter
    assert again.stdout.strip() == format_time(ms(later["expiry_timestamp_ms"]))

    # Others may not.
    refused = tokens(broker, "renew", "--hmac", hmac, user="carol")
    assert refused.exit_code == 1
    assert "DELEGATION_TOKEN_OWNER_MISMATCH" in refused.stderr


def test_expire_ends_the_login_and_the_listing(broker: RunningBroker) -> None:
    created = create(broker)
    token_id, hmac = str(created["token_id"]), str(created["hmac"])
    assert logs_in(broker, token_id, hmac)

    later = tokens(broker, "expire", "--hmac", hmac, "--expiry-time-period", "600000", "--json")
    assert later.exit_code == 0, later.output
    answered = json.loads(later.stdout)["expiry_timestamp_ms"]
    assert answered < ms(created["expiry_timestamp_ms"])
    assert token_id in {t["token_id"] for t in describe(broker)}

    done = tokens(broker, "expire", "--hmac-stdin", input=f"  {hmac}  \r\n")
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == "expired now"
    assert not logs_in(broker, token_id, hmac)
    assert token_id not in {t["token_id"] for t in describe(broker)}

    gone = tokens(broker, "expire", "--hmac", hmac)
    assert gone.exit_code == 1
    assert "DELEGATION_TOKEN_NOT_FOUND" in gone.stderr and hmac not in gone.output
    gone_renew = tokens(broker, "renew", "--hmac", hmac)
    assert gone_renew.exit_code == 1 and "DELEGATION_TOKEN_NOT_FOUND" in gone_renew.stderr


def test_usage_errors(broker: RunningBroker) -> None:
    for args, input, says in [
        (["renew", "--hmac", "not*base64!"], None, "not valid base64"),
        (["expire", "--hmac", "abc"], None, "not valid base64"),  # bad padding
        (["expire", "--hmac-stdin"], "%%%\n", "not valid base64"),
        (["renew", "--hmac-stdin"], "\n", "the HMAC is empty"),
        (["renew"], None, "--hmac B64, or --hmac-stdin"),
        (["expire", "--hmac", "AAAA", "--hmac-stdin"], "AAAA\n", "not both"),
        (["create", "--renewer", "User:"], None, "Type:name"),
        (["describe", "--owner-principal", ":bob"], None, "Type:name"),
    ]:
        result = tokens(broker, *args, input=input)
        assert result.exit_code == 2, (args, result.output)
        assert says in result.output, (args, result.output)
    assert "not*base64!" not in tokens(broker, "renew", "--hmac", "not*base64!").output
    assert "tokens" in CliRunner().invoke(main, ["--help"]).output


def test_refused_without_the_secret_key(tmp_path: Path) -> None:
    with start(tmp_path) as plain:
        for args in (["create"], ["describe"], ["renew", "--hmac", "AAAA"]):
            result = tokens(plain, *args)
            assert result.exit_code == 1, (args, result.output)
            assert "DELEGATION_TOKEN_AUTH_DISABLED" in result.stderr
            assert "delegation.token.secret.key" in result.stderr


def test_refused_from_a_token_login(broker: RunningBroker) -> None:
    created = create(broker)
    token_id, hmac = str(created["token_id"]), str(created["hmac"])
    as_token = [
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        "sasl.mechanism=SCRAM-SHA-512",
        "-X",
        f"sasl.username={token_id}",
        "-X",
        f"sasl.password={hmac}",
        "-X",
        "sasl.scram.tokenauth=true",
    ]
    result = CliRunner().invoke(
        main, ["tokens", "describe", "-b", broker.bootstrap_servers, *as_token]
    )
    assert result.exit_code == 1, result.output
    assert "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED" in result.stderr


def test_create_for_another_owner(broker: RunningBroker) -> None:
    created = create(broker, "--owner-principal", "User:bob")
    assert (created["owner"], created["token_requester"]) == ("User:bob", "User:admin")
    assert created["token_id"] in {
        t["token_id"] for t in describe(broker, "--owner-principal", "User:bob", user="bob")
    }
