"""``trafka groups remove-members`` against an in-process brokerlite: a static
member that shut down (no LeaveGroup) removed by instance id, an unknown one
failing the command for itself, ``--all``, an unknown group, and usage errors."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import anyio
import pytest
from click.testing import CliRunner, Result
from unique_names import names as _names

from trafka.brokerlite import RunningBroker
from trafka.sdk import NewTopic, open_admin, open_consumer
from trafka.tools.cli import main

pytestmark = pytest.mark.timeout(60)


def fresh(prefix: str) -> str:
    return f"{prefix}-rm-{next(_names)}"


def run(broker: RunningBroker, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "-b", broker.bootstrap_servers])


def static_members(broker: RunningBroker, group: str, *instances: str) -> None:
    """Members of ``group`` with these instance ids, each closed after joining
    (static members send no LeaveGroup: the group keeps them)."""
    servers = broker.bootstrap_servers

    async def main_() -> None:
        topic = fresh("topic")
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.create_topics([NewTopic(topic, len(instances))])
        settings: dict[str, Any] = {
            "bootstrap_servers": servers,
            "group_id": group,
            "session_timeout_ms": 120_000,
            "heartbeat_interval_ms": 100,
            "fetch_max_wait_ms": 50,  # their close waits for the fetches held at the end
        }
        # Together: a closed static member is waited for by the next rebalance.
        async with contextlib.AsyncExitStack() as stack:
            consumers = [
                await stack.enter_async_context(
                    open_consumer(topic, group_instance_id=instance, **settings)
                )
                for instance in instances
            ]
            with anyio.fail_after(30):
                while not all(len(c.assignment()) == 1 for c in consumers):
                    for c in consumers:
                        await c.getmany(timeout_ms=20)

    anyio.run(main_, backend="trio")


def members(broker: RunningBroker, group: str) -> list[str | None]:
    res = run(broker, "groups", "describe", group, "--json")
    assert res.exit_code == 0, res.output
    (desc,) = json.loads(res.stdout)
    return sorted(m["group_instance_id"] for m in desc["members"])


def test_remove_by_instance_id(broker: RunningBroker) -> None:
    group = fresh("g")
    static_members(broker, group, "host-1", "host-2", "host-3")
    assert members(broker, group) == ["host-1", "host-2", "host-3"]

    res = run(broker, "groups", "remove-members", group, "--instance-id", "host-2")
    assert res.exit_code == 0, res.output
    assert f"removed member host-2 from group {group}" in res.stderr
    assert members(broker, group) == ["host-1", "host-3"]

    # One unknown instance id: the others are removed, the command exits 1.
    res = run(
        broker, "groups", "remove-members", group,
        "--instance-id", "host-1", "--instance-id", "nobody", "--reason", "scaled down",
    )  # fmt: skip
    assert res.exit_code == 1
    assert f"removed member host-1 from group {group}" in res.stderr
    assert "member nobody: UNKNOWN_MEMBER_ID" in res.stderr
    assert members(broker, group) == ["host-3"]


def test_remove_all_and_json(broker: RunningBroker) -> None:
    group = fresh("g")
    static_members(broker, group, "a", "b")
    res = run(broker, "groups", "remove-members", group, "--all", "--json")
    assert res.exit_code == 0, res.output
    assert sorted(json.loads(res.stdout), key=lambda r: r["member"]) == [
        {"member": "a", "error": None},
        {"member": "b", "error": None},
    ]
    assert members(broker, group) == []
    res = run(broker, "groups", "remove-members", group, "--all")
    assert res.exit_code == 0 and "has no members" in res.stderr


def test_unknown_group_and_usage(broker: RunningBroker) -> None:
    group = fresh("missing")
    res = run(broker, "groups", "remove-members", group, "--instance-id", "x", "--json")
    assert res.exit_code == 1
    assert json.loads(res.stdout) == [{"member": "x", "error": "UNKNOWN_MEMBER_ID"}]
    res = run(broker, "groups", "remove-members", group, "--all")
    assert res.exit_code == 1 and "GROUP_ID_NOT_FOUND" in res.output
    for args in ([], ["--all", "--instance-id", "x"]):
        res = run(broker, "groups", "remove-members", group, *args)
        assert res.exit_code == 2 and "--instance-id ID" in res.output
