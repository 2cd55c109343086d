"""``trafka client-metrics`` against brokerlite, as kafka-client-metrics.sh: alter
(a named and a generated resource), list, describe (table and JSON), delete, usage
errors caught before any request, and the broker's refusals explained."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner, Result
from unique_names import names as _names

from trafka.brokerlite import RunningBroker
from trafka.tools.cli import main

pytestmark = pytest.mark.timeout(120)


def fresh(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def run(broker: RunningBroker, *args: str) -> Result:
    return CliRunner().invoke(main, ["client-metrics", *args, "-b", broker.bootstrap_servers])


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def described(broker: RunningBroker, *args: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(ok(run(broker, "--describe", "--json", *args)).stdout)
    return found


def test_alter_list_describe_delete(broker: RunningBroker) -> None:
    name = fresh("producers")
    result = ok(
        run(
            broker,
            "--alter",
            "--name",
            name,
            "--metrics",
            "org.apache.kafka.producer.,org.apache.kafka.consumer.",
            "--interval",
            "1000",
            "--match",
            "client_id=app-.*,client_software_name=librdkafka",
        )
    )
    assert f"Altered client metrics config for {name}." in result.stderr
    assert name in ok(run(broker, "--list")).stdout.split()
    configs = described(broker, "--name", name)[name]
    assert configs == {
        "interval.ms": "1000",
        "match": "client_id=app-.*,client_software_name=librdkafka",
        "metrics": "org.apache.kafka.producer.,org.apache.kafka.consumer.",
    }
    ok(run(broker, "--alter", "--name", name, "--interval", "2000"))
    assert described(broker, "--name", name)[name]["interval.ms"] == "2000"
    table = ok(run(broker, "--describe")).stdout
    assert table.splitlines()[0].split() == ["name", "metrics", "interval.ms", "match"]
    assert any(line.startswith(name) and "2000" in line for line in table.splitlines())
    assert "Deleted" in ok(run(broker, "--delete", "--name", name)).stderr
    assert name not in ok(run(broker, "--list")).stdout.split()


def test_a_generated_name(broker: RunningBroker) -> None:
    before = set(ok(run(broker, "--list")).stdout.split())
    ok(run(broker, "--alter", "--generate-name", "--metrics", "*"))
    (created,) = set(ok(run(broker, "--list")).stdout.split()) - before
    assert described(broker, "--name", created)[created]["metrics"] == "*"
    ok(run(broker, "--delete", "--name", created))


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--list", "--metrics", "*"],
        ["--alter", "--metrics", "*"],
        ["--alter", "--name", "x"],
        ["--alter", "--name", "x", "--generate-name", "--metrics", "*"],
        ["--delete"],
    ],
)
def test_usage_errors(broker: RunningBroker, args: list[str]) -> None:
    result = run(broker, *args)
    assert result.exit_code == 2, result.output


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--interval", "10"], "INVALID_REQUEST"),
        (["--match", "client_colour=red"], "INVALID_CONFIG"),
    ],
)
def test_refusals_are_explained(broker: RunningBroker, args: list[str], words: str) -> None:
    result = run(broker, "--alter", "--name", fresh("bad"), *args)
    assert result.exit_code == 1
    assert f"the broker refused to alter client metrics ({words})" in result.output
