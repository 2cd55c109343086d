"""``trafka groups`` on a share group's offsets, against an in-process brokerlite:
``describe`` shows each partition's start offset and lag (as
kafka-share-groups.sh --describe --offsets), ``reset-offsets`` moves the start
offsets (AlterShareGroupOffsets) only while the group is empty, and
``delete-offsets`` forgets whole topics (DeleteShareGroupOffsets)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from click.testing import CliRunner, Result
from unique_names import names as _names

from trafka.brokerlite import RunningBroker
from trafka.tools.cli import main

pytestmark = pytest.mark.timeout(90)


def fresh(prefix: str) -> str:
    return f"share-offsets-{prefix}-{next(_names)}"


def run(broker: RunningBroker, *args: str, input: bytes | None = None, ok: bool = True) -> Result:
    result = CliRunner().invoke(main, [*args, "-b", broker.bootstrap_servers], input=input)
    if ok:
        assert result.exit_code == 0, (result.output, result.exception)
    return result


def describe(broker: RunningBroker, group: str) -> dict[str, Any]:
    (desc,) = json.loads(run(broker, "groups", "describe", group, "--json").stdout)
    assert desc["type"] == "share"
    return dict(desc)


def starts(broker: RunningBroker, group: str) -> list[tuple[str, int, int | None, int | None]]:
    return [
        (p["topic"], p["partition"], p["start_offset"], p["lag"])
        for p in describe(broker, group)["partitions"]
    ]


def queue(broker: RunningBroker, values: list[str]) -> tuple[str, str]:
    """A one-partition topic holding ``values`` and a share group reading it from the start."""
    topic, group = fresh("t"), fresh("g")
    run(broker, "topics", "create", topic, "-p", "1")
    run(broker, "produce", topic, "-q", input="".join(v + "\n" for v in values).encode())
    run(broker, "groups", "set-config", group, "share.auto.offset.reset=earliest")
    return topic, group


def test_describe_reset_and_delete_a_share_group_s_offsets(broker: RunningBroker) -> None:
    values = [f"v{i}" for i in range(10)]
    topic, group = queue(broker, values)
    # Four records consumed and accepted; the rest released when the member left.
    assert run(broker, "share-consume", topic, "-G", group, "-c", "4").stdout == "v0\nv1\nv2\nv3\n"
    desc = describe(broker, group)
    assert desc["state"] == "Empty" and desc["total_lag"] == 6
    assert desc["partitions"] == [
        {"topic": topic, "partition": 0, "start_offset": 4, "leader_epoch": 0, "lag": 6}
    ]
    text = run(broker, "groups", "describe", group).stdout
    assert f"Group: {group}  Type: share  State: Empty" in text and "TotalLag: 6" in text
    lines = text.splitlines()
    assert lines[1].split() == ["TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"]
    assert lines[2].split() == [topic, "0", "0", "4", "6"]

    # A dry run changes nothing.
    dry = run(broker, "groups", "reset-offsets", group, "-t", topic, "--to-offset", "8")
    assert dry.stdout.splitlines()[0].split() == [
        "TOPIC",
        "PARTITION",
        "START-OFFSET",
        "NEW-OFFSET",
    ]
    assert dry.stdout.splitlines()[1].split() == [topic, "0", "4", "8"]
    assert "dry run" in dry.stderr
    assert starts(broker, group) == [(topic, 0, 4, 6)]
    plan = run(
        broker, "groups", "reset-offsets", group, "-t", f"{topic}:0", "--to-offset", "8",
        "--execute", "--json",
    )  # fmt: skip
    assert json.loads(plan.stdout) == [
        {"topic": topic, "partition": 0, "current_offset": 4, "new_offset": 8}
    ]
    assert starts(broker, group) == [(topic, 0, 8, 2)]
    assert run(broker, "share-consume", topic, "-G", group, "-c", "2").stdout == "v8\nv9\n"
    assert starts(broker, group) == [(topic, 0, 10, 0)]
    # --to-offset is clamped to the log; --all-topics takes the partitions with state.
    run(broker, "groups", "reset-offsets", group, "-t", topic, "--to-offset", "99", "--execute")
    assert starts(broker, group) == [(topic, 0, 10, 0)]
    run(broker, "groups", "reset-offsets", group, "--all-topics", "--to-earliest", "--execute")
    assert starts(broker, group) == [(topic, 0, 0, 10)]

    # delete-offsets forgets whole topics; the next member starts by share.auto.offset.reset.
    res = run(broker, "groups", "delete-offsets", group, "-t", f"{topic}:0", ok=False)
    assert res.exit_code == 2 and "whole topics" in res.output
    res = run(broker, "groups", "delete-offsets", group, "-t", topic)
    assert f"deleted the share-group offsets of 1 topic(s) for group {group}" in res.stderr
    assert describe(broker, group)["partitions"] == []
    again = run(broker, "groups", "delete-offsets", group, "-t", topic, ok=False)
    assert again.exit_code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in again.output
    assert "Traceback" not in again.output
    res = run(broker, "share-consume", topic, "-G", group, "-c", "10")
    assert res.stdout.splitlines() == values


def test_reset_is_refused_while_a_member_is_in_the_group(broker: RunningBroker) -> None:
    topic, group = queue(broker, ["a", "b"])
    proc = subprocess.Popen(
        [*[sys.executable, "-m", "trafka.tools.cli"], "share-consume", topic, "-G", group,
         "-b", broker.bootstrap_servers],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert [proc.stdout.readline() for _ in range(2)] == [b"a\n", b"b\n"]
        res = run(
            broker, "groups", "reset-offsets", group, "-t", topic, "--to-earliest", "--execute",
            ok=False,
        )  # fmt: skip
        assert res.exit_code == 1 and "only be reset while it is empty" in res.output
        res = run(broker, "groups", "delete-offsets", group, "-t", topic, ok=False)
        assert res.exit_code == 1 and "NON_EMPTY_GROUP" in res.output
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert describe(broker, group)["state"] == "Empty"


def test_classic_groups_keep_their_offsets_commands(broker: RunningBroker) -> None:
    """A group nobody has yet stays a classic group's matter: reset-offsets commits."""
    topic, _ = queue(broker, ["x", "y", "z"])
    group = fresh("classic")
    run(broker, "groups", "reset-offsets", group, "-t", topic, "--to-offset", "2", "--execute")
    (desc,) = json.loads(run(broker, "groups", "describe", group, "--json").stdout)
    assert "type" not in desc
    assert [(r["partition"], r["current_offset"]) for r in desc["partitions"]] == [(0, 2)]
    res = run(broker, "groups", "delete-offsets", group, "-t", f"{topic}:0")
    assert "deleted the offsets of 1 partition(s)" in res.stderr
