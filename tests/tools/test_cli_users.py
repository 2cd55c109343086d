"""``trafka users`` against a SASL brokerlite: passwords set from a prompt or
stdin log in over SCRAM afterwards, are never echoed, and go with ``delete``;
the broker's refusals exit 1 naming Kafka's error."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anyio
import pytest
from click.testing import CliRunner, Result

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.sdk import open_admin
from trafka.sdk.errors import AuthenticationError
from trafka.tools.cli import main

pytestmark = pytest.mark.timeout(120)

ADMIN_PASSWORD = "admin-pw"
AS_ADMIN = [
    "-X",
    "security.protocol=SASL_PLAINTEXT",
    "-X",
    "sasl.mechanism=PLAIN",
    "-X",
    "sasl.username=admin",
    "-X",
    f"sasl.password={ADMIN_PASSWORD}",
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    data = tmp_path_factory.mktemp("cli-users")
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=data,
        security_protocol="SASL_PLAINTEXT",
        sasl_users={"admin": ADMIN_PASSWORD},
    ) as running:
        yield running


def users(broker: RunningBroker, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(
        main, ["users", *args, "-b", broker.bootstrap_servers, *AS_ADMIN], input=input
    )


def logs_in(broker: RunningBroker, mechanism: str, user: str, password: str) -> bool:
    async def attempt() -> bool:
        with anyio.fail_after(30):
            async with open_admin(
                bootstrap_servers=broker.bootstrap_servers,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism=mechanism,
                sasl_username=user,
                sasl_password=password,
            ) as admin:
                try:
                    await admin.list_topics()
                except AuthenticationError:
                    return False
                return True

    return anyio.run(attempt, backend="trio")


def test_set_from_a_prompt_list_describe_and_delete(broker: RunningBroker) -> None:
    password = "prompted-Secret-1"
    done = users(broker, "set-password", "erin", input=f"{password}\n{password}\n")
    assert done.exit_code == 0, done.output
    assert password not in done.output  # the prompt does not echo it
    assert "set the SCRAM-SHA-256 password of erin" in done.output
    assert "set the SCRAM-SHA-512 password of erin" in done.output
    assert logs_in(broker, "SCRAM-SHA-256", "erin", password)
    assert logs_in(broker, "SCRAM-SHA-512", "erin", password)

    listed = users(broker, "list", "--json")
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert {"user": "erin", "mechanism": "SCRAM-SHA-512", "iterations": 4096} in rows
    assert {r["user"] for r in rows} == {"admin", "erin"}
    table = users(broker, "describe", "erin")
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines() == [
        "USER  MECHANISM      ITERATIONS",
        "erin  SCRAM-SHA-256  4096",
        "erin  SCRAM-SHA-512  4096",
    ]

    gone = users(broker, "delete", "erin")
    assert gone.exit_code == 0, gone.output
    assert "deleted the SCRAM-SHA-512 credential of erin" in gone.output
    assert not logs_in(broker, "SCRAM-SHA-256", "erin", password)
    missing = users(broker, "describe", "erin")
    assert missing.exit_code == 1 and "RESOURCE_NOT_FOUND" in missing.output


def test_set_from_stdin_for_one_mechanism(broker: RunningBroker) -> None:
    done = users(
        broker,
        "set-password",
        "frank",
        "--password-stdin",
        "-M",
        "scram-sha-512",
        "--iterations",
        "8192",
        input="from-stdin\r\nignored second line\n",
    )
    assert done.exit_code == 0, done.output
    assert "from-stdin" not in done.output
    described = json.loads(users(broker, "describe", "frank", "--json").stdout)
    assert described == [{"user": "frank", "mechanism": "SCRAM-SHA-512", "iterations": 8192}]
    assert logs_in(broker, "SCRAM-SHA-512", "frank", "from-stdin")
    assert not logs_in(broker, "SCRAM-SHA-256", "frank", "from-stdin")
    removed = users(broker, "delete", "frank", "-M", "SCRAM-SHA-512")
    assert removed.exit_code == 0, removed.output
    again = users(broker, "delete", "frank", "-M", "SCRAM-SHA-512")
    assert again.exit_code == 1 and "RESOURCE_NOT_FOUND" in again.output


def test_refusals_and_usage_errors(broker: RunningBroker) -> None:
    weak = users(
        broker, "set-password", "gina", "--password-stdin", "--iterations", "100", input="pw\n"
    )
    assert weak.exit_code == 1 and "UNACCEPTABLE_CREDENTIAL" in weak.output
    empty = users(broker, "set-password", "gina", "--password-stdin", input="\n")
    assert empty.exit_code == 2 and "the password is empty" in empty.output
    mismatch = users(broker, "set-password", "gina", input="first-Pw-x1\nsecond-Pw-x2\n")
    assert mismatch.exit_code != 0  # asked again, then no more input: aborted
    assert "do not match" in mismatch.output
    assert "first-Pw-x1" not in mismatch.output and "second-Pw-x2" not in mismatch.output
    bad_mechanism = users(broker, "delete", "gina", "-M", "SCRAM-SHA-1")
    assert bad_mechanism.exit_code == 2
    listed = json.loads(users(broker, "list", "--json").stdout)
    assert "gina" not in {r["user"] for r in listed}
    assert "users" in CliRunner().invoke(main, ["--help"]).output


def test_rows_are_in_user_and_mechanism_order() -> None:
    """Kafka answers DescribeUserScramCredentials in no set order (4.x's KRaft
    brokers gave SCRAM-SHA-512 before SCRAM-SHA-256, tests/tools/test_cli_kafka.py):
    the command prints by user, then mechanism, whatever the broker's order."""
    from trafka.sdk.admin.scram import ScramCredentialInfo, UserScramCredentialsDescription
    from trafka.tools.cli_users import _rows

    def user(name: str, *mechanisms: str) -> UserScramCredentialsDescription:
        infos = tuple(ScramCredentialInfo(m, 4096) for m in mechanisms)
        return UserScramCredentialsDescription(name, infos)

    found = {
        "bob": user("bob", "SCRAM-SHA-512", "SCRAM-SHA-256"),
        "al": user("al", "SCRAM-SHA-512"),
    }
    assert [(r["user"], r["mechanism"]) for r in _rows(found)] == [
        ("al", "SCRAM-SHA-512"),
        ("bob", "SCRAM-SHA-256"),
        ("bob", "SCRAM-SHA-512"),
    ]
