"""``trafka quotas`` against brokerlite: alter and describe (filters, defaults,
JSON, removal, --dry-run), usage errors caught before any request, the broker's
INVALID_REQUEST with its reason, and CLUSTER_AUTHORIZATION_FAILED explained."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from unique_names import names as _names

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.tools.cli import main
from trafka.tools.cli_quotas import format_value

pytestmark = pytest.mark.timeout(120)


def fresh(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def quotas(broker: RunningBroker | str, *args: str) -> Result:
    bootstrap = broker if isinstance(broker, str) else broker.bootstrap_servers
    return CliRunner().invoke(main, ["quotas", *args, "-b", bootstrap])


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def described(broker: RunningBroker, *args: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(ok(quotas(broker, "describe", "--json", *args)).stdout)
    return rows


def test_format_value() -> None:
    assert format_value(1048576.0) == "1048576"
    assert format_value(12.5) == "12.5"
    assert format_value(0.0) == "0"


def test_alter_then_describe(broker: RunningBroker) -> None:
    user = fresh("alice")
    result = ok(
        quotas(
            broker,
            "alter",
            "--user",
            user,
            "--add-config",
            "producer_byte_rate=1048576,consumer_byte_rate=2097152",
            "--add-config",
            "request_percentage=12.5",
        )
    )
    assert f"altered the quotas of user={user}" in result.stderr
    assert "producer_byte_rate=1048576" in result.stderr
    ok(
        quotas(
            broker,
            "alter",
            "--user",
            user,
            "--client-id-default",
            "--add-config",
            "controller_mutation_rate=5",
        )
    )
    assert described(broker, "--user", user) == [
        {
            "entity": {"user": user},
            "quotas": {
                "consumer_byte_rate": 2097152.0,
                "producer_byte_rate": 1048576.0,
                "request_percentage": 12.5,
            },
        },
        {"entity": {"user": user, "client-id": None}, "quotas": {"controller_mutation_rate": 5.0}},
    ]
    assert [r["entity"] for r in described(broker, "--user", user, "--strict")] == [{"user": user}]
    assert [r["entity"] for r in described(broker, "--user", user, "--client-id-default")] == [
        {"user": user, "client-id": None}
    ]
    table = ok(quotas(broker, "describe", "--user", user)).stdout.splitlines()
    assert table[0].split() == ["ENTITY", "QUOTA", "VALUE"]
    assert f"user={user}, client-id=<default>  controller_mutation_rate  5" in table
    assert any(line.split()[-2:] == ["request_percentage", "12.5"] for line in table)
    # Delete one key; the others stay.
    ok(quotas(broker, "alter", "--user", user, "--delete-config", "request_percentage"))
    assert described(broker, "--user", user, "--strict")[0]["quotas"] == {
        "consumer_byte_rate": 2097152.0,
        "producer_byte_rate": 1048576.0,
    }
    # Every quota without a filter includes these.
    assert {"user": user} in [r["entity"] for r in described(broker)]


def test_defaults_and_ip_entities(broker: RunningBroker) -> None:
    ok(quotas(broker, "alter", "--ip-default", "--add-config", "connection_creation_rate=100"))
    ok(quotas(broker, "alter", "--ip", "10.9.8.7", "--add-config", "connection_creation_rate=3"))
    ips = described(broker, "--ip-default")
    assert ips == [{"entity": {"ip": None}, "quotas": {"connection_creation_rate": 100.0}}]
    table = ok(quotas(broker, "describe", "--ip", "10.9.8.7")).stdout
    assert "ip=10.9.8.7" in table and "connection_creation_rate  3" in table
    ok(quotas(broker, "alter", "--ip-default", "--delete-config", "connection_creation_rate"))
    assert described(broker, "--ip-default") == []
    nothing = ok(quotas(broker, "describe", "--ip-default"))
    assert nothing.stdout == "" and "no client quotas match" in nothing.stderr


def test_dry_run_changes_nothing(broker: RunningBroker) -> None:
    client = fresh("app")
    result = ok(
        quotas(
            broker,
            "alter",
            "--client-id",
            client,
            "--add-config",
            "producer_byte_rate=10",
            "--dry-run",
        )
    )
    assert "dry run" in result.stderr and "nothing changed" in result.stderr
    assert described(broker, "--client-id", client) == []


def test_the_brokers_refusal_gives_its_reason(broker: RunningBroker) -> None:
    result = quotas(broker, "alter", "--user", "bob", "--add-config", "bogus_rate=5")
    assert result.exit_code == 1
    assert "INVALID_REQUEST" in result.stderr and "bogus_rate" in result.stderr
    result = quotas(
        broker, "alter", "--ip", "10.0.0.1", "--add-config", "producer_byte_rate=5", "--dry-run"
    )
    assert result.exit_code == 1 and "INVALID_REQUEST" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["alter", "--add-config", "producer_byte_rate=1"], "give the entity"),
        (["alter", "--user", "a"], "--add-config and/or --delete-config"),
        (["alter", "--user", "a", "--user-default", "--delete-config", "x"], "not both"),
        (["alter", "--user", "a", "--add-config", "x"], "not key=value"),
        (["alter", "--user", "a", "--add-config", "x=fast"], "not a number"),
        (["alter", "--user", "a", "--add-config", "x=1", "--delete-config", "x"], "both set"),
        (["alter", "--user", "a", "--add-config", "x=1,x=2"], "given twice"),
        (["describe", "--ip", "10.0.0.1", "--user", "a"], "cannot be combined"),
        (["describe", "--client-id", ""], "must not be empty"),
    ],
)
def test_usage_errors_send_nothing(args: list[str], message: str) -> None:
    # Nothing listens on port 9: any request would fail differently (exit 1).
    result = quotas("127.0.0.1:9", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_a_principal_without_cluster_rights_is_told_what_it_needs(tmp_path: Path) -> None:
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path,
        authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    ) as running:
        refused = quotas(running, "describe")
        assert refused.exit_code == 1
        assert "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
        assert "DESCRIBE_CONFIGS on the cluster" in refused.stderr
        refused = quotas(running, "alter", "--user", "a", "--add-config", "producer_byte_rate=1")
        assert refused.exit_code == 1 and "ALTER_CONFIGS on the cluster" in refused.stderr


def test_listed_in_the_help() -> None:
    result = ok(CliRunner().invoke(main, ["--help"]))
    assert "  quotas  " in result.stdout
    # The help lists it without importing it (tests/tools/test_cli_help.py); it loads.
    command = main.get_command(click.Context(main), "quotas")
    assert command is not None and not (command.help or "").startswith("Unavailable")
