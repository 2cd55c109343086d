"""``trafka reassign execute --throttle``: which replicas and brokers it throttles, no
sockets (the whole flow against a cluster is in tests/brokerlite/test_cluster.py).

Kafka's tool (``ReassignPartitionsCommand``, KIP-73 and the ops documentation's
"Limiting Bandwidth Usage during Data Migration"): a partition moves *from* the
replicas it has (for a move under way, those it had before it: its replicas less
the ones being added) and *to* the target's other replicas; the leader list is
every ``partition:from`` pair, the follower list every ``partition:to`` pair, each
sorted as strings, per topic; the rates go to every broker a partition moves
from or to. A move under way that the plan does not name is throttled too.
"""

from __future__ import annotations

import click
import pytest

from trafka.tools.cli_cluster import throttle_configs

LEADER = "leader.replication.throttled.replicas"
FOLLOWER = "follower.replication.throttled.replicas"


def test_throttled_replicas_and_brokers_of_a_plan() -> None:
    current = {
        ("t", 0): [1, 2, 3, 4],
        ("t", 1): [5, 6, 7],
        ("t", 2): [1, 2],
        ("t", 10): [4],
        ("u", 0): [2, 3],
    }
    ongoing = {("t", 0): ([1, 2, 3, 4], [4]), ("t", 1): ([5, 6, 7], [7])}
    plan = {("t", 0): [1, 2, 6], ("t", 2): [3], ("t", 10): [4, 8], ("u", 0): [1, 2]}
    configs, brokers = throttle_configs(plan, current, ongoing)
    assert configs == {
        # t-0 started from 1,2,3 (4 was being added); t-1 is a move under way.
        "t": {
            LEADER: "0:1,0:2,0:3,10:4,1:5,1:6,2:1,2:2",
            FOLLOWER: "0:6,10:8,1:7,2:3",
        },
        "u": {LEADER: "0:2,0:3", FOLLOWER: "0:1"},
    }
    assert brokers == [1, 2, 3, 4, 5, 6, 7, 8]


def test_a_plan_that_moves_nothing_throttles_its_replicas_as_leaders_only() -> None:
    configs, brokers = throttle_configs({("t", 0): [2, 1]}, {("t", 0): [1, 2]}, {})
    assert configs == {"t": {LEADER: "0:1,0:2", FOLLOWER: ""}}
    assert brokers == [1, 2]


def test_an_unknown_partition_is_refused() -> None:
    with pytest.raises(click.ClickException, match="t-9: no such partition"):
        throttle_configs({("t", 9): [1]}, {("t", 0): [1]}, {})
