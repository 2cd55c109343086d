"""A broker's wall clock stepped forward while a group's member is alive: Kafka keeps
the member, since a session's expiry is a timer on a monotonic clock (Kafka 4's
group coordinator schedules a classic member's heartbeat expiry on its
CoordinatorTimer, a SystemTimer read with ``Time.hiResClockMs``; 3.9's puts a
DelayedHeartbeat in a purgatory on the same kind of timer), not a comparison
with ``System.currentTimeMillis``. An NTP step of the broker's machine must not
end every session it holds.

Each broker process runs under clockshift.c (preloaded), whose wall clock the
test steps 10 minutes forward; the member is a trafka consumer in a group with a
30 s session, heartbeating every 3 s. What is checked: its partitions are
assigned once, and nothing else happens to them in the 8 s after the step (a
member whose session the broker ended learns it at its next heartbeat,
UNKNOWN_MEMBER_ID: its partitions are lost, then assigned again). The clock then
steps back the 10 minutes, and no request of the consumer fails in the 7 s
after (a broker timing its parked Fetch on the wall clock holds the long poll
parked across the step back for 10 minutes more, past the consumer's 5 s
request timeout: the request fails and the connection with it). The heartbeats
are rare so that a broker measuring sessions on the wall clock ends the session
before the next one renews it: the consumer's parked Fetch (a 0.5 s long poll)
wakes brokerlite's deadline scan first; with heartbeats every 0.5 s one sometimes
came first and renewed the session (a CI run saw it pass).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from clockshift import ClockShift, available
from kafka_peers import KAFKA_4

from trafka.sdk import NewTopic, open_admin, open_consumer

pytestmark = [pytest.mark.slow]
STEP_S = 600.0
# Watched after the step back: longer than the consumer's request timeout, so a
# long poll parked across the step and stretched by it fails in the client.
REQUEST_TIMEOUT_MS = 5_000
BACK_WATCH_S = 7


class _Assignments:
    """What the consumer was told of its partitions, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, set[Any]]] = []

    async def on_partitions_revoked(self, partitions: set[Any]) -> None:
        self.events.append(("revoked", set(partitions)))

    async def on_partitions_assigned(self, partitions: set[Any]) -> None:
        self.events.append(("assigned", set(partitions)))

    async def on_partitions_lost(self, partitions: set[Any]) -> None:
        self.events.append(("lost", set(partitions)))


async def _events_across_a_step(
    bootstrap: str, clock: ClockShift
) -> tuple[list[tuple[str, set[Any]]], int]:
    topic = f"clock-step-{time.monotonic_ns()}"
    async with open_admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    listener = _Assignments()
    async with open_consumer(bootstrap_servers=bootstrap, group_id=f"g-{topic}",
                             session_timeout_ms=30_000, heartbeat_interval_ms=3_000,
                             request_timeout_ms=REQUEST_TIMEOUT_MS, enable_auto_commit=False,
                             ) as consumer:  # fmt: skip
        consumer.subscribe([topic], listener=listener)
        with trio.fail_after(60):
            while not listener.events:
                await consumer.getmany(timeout_ms=200)
        clock.set(STEP_S)
        deadline = trio.current_time() + 8
        while trio.current_time() < deadline:
            await consumer.getmany(timeout_ms=200)
        clock.set(0.0)  # the step back
        deadline = trio.current_time() + BACK_WATCH_S
        while trio.current_time() < deadline:
            await consumer.getmany(timeout_ms=200)
        failed = sum(b.requests_failed for b in consumer.statistics().brokers.values())
        return list(listener.events), failed  # before the close revokes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_brokerlite_keeps_a_member_across_a_wall_clock_step(tmp_path: Path) -> None:
    why = available()
    if why is not None:
        pytest.skip(why)
    clock = ClockShift(tmp_path / "clock")
    port = _free_port()
    # no initial rebalance delay, as the Kafka control's (kafka_peers)
    argv = [sys.executable, "-m", "trafka.tools.cli", "broker", "--listen", f"127.0.0.1:{port}",
            "--data-dir", str(tmp_path / "data"), "--no-announce",
            "--group-initial-rebalance-delay-ms", "0"]  # fmt: skip
    with open(tmp_path / "broker.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **clock.env()})  # fmt: skip
    try:
        events, failed = trio.run(_events_across_a_step, f"127.0.0.1:{port}", clock)
    finally:
        proc.kill()
        proc.wait()
    assert [e for e, _ in events] == ["assigned"] and failed == 0, (
        events,
        failed,
        (tmp_path / "broker.log").read_text()[-2000:],
    )


@pytest.mark.kafka
def test_kafka_keeps_a_member_across_a_wall_clock_step(tmp_path: Path, make_kafka: Any) -> None:
    """The control: Kafka 4 (KRaft, one node) under the same step."""
    why = available()
    if why is not None:
        pytest.skip(why)
    clock = ClockShift(tmp_path / "clock")
    env = [f"{k}={v}" for k, v in clock.env().items()]
    kafka = make_kafka(version=KAFKA_4, wrap=lambda n: ["env", *env])
    events, failed = trio.run(_events_across_a_step, kafka.bootstrap_servers, clock)
    assert [e for e, _ in events] == ["assigned"] and failed == 0, (events, failed)
