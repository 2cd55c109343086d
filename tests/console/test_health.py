"""The console's view of whether the cluster answers (:mod:`trafka.console.health`),
on a clock the test moves: when checks are made, what a failed or answered one
changes, and the bound on how long a page waits for a dead cluster."""

from __future__ import annotations

import pytest

from trafka.console.health import ASKED_GAP, ClusterHealth


def test_checks_are_periodic_and_one_at_a_time() -> None:
    h = ClusterHealth(interval=1.0, check_timeout=1.5)
    assert h.state == "unknown" and h.next_check(-50.0, asked=False) == -50.0  # at once
    h.check_started(-50.0)
    assert h.checking and h.next_check(-49.0, asked=True) == float("inf")
    assert h.check_answered(-49.9) is not None and h.state == "up"
    assert not h.checking
    assert h.next_check(-49.9, asked=False) == -49.0  # a second after the last start
    assert h.next_check(-49.9, asked=True) == pytest.approx(-50.0 + ASKED_GAP)
    assert h.next_check(-40.0, asked=True) == -40.0  # long since: now


def test_one_failed_check_is_down_one_answered_is_up() -> None:
    h = ClusterHealth()
    h.check_started(0.0)
    change = h.check_failed(1.5, "no answer within 1.5 s")
    assert change is not None and change.state == "down" and change.reason.startswith("no answer")
    assert h.down and h.since == 1.5 and h.down_for(4.0) == 2.5
    h.check_started(2.5)
    assert h.check_failed(4.0, "connection refused") is None  # still down: no news
    assert h.reason == "connection refused" and h.since == 1.5  # the latest reason, same since
    h.check_started(5.0)
    up = h.check_answered(5.1)
    assert up is not None and up.state == "up" and not h.down and h.down_for(9.0) == 0.0
    assert h.check_answered(6.1) is None  # still up: no news
    assert h.checks == 4


def test_a_page_is_told_within_two_seconds() -> None:
    """Kafka's tools leave it to the person; the brief is 2 s. A page asks for
    a check: it starts within ASKED_GAP of the last one and fails within the
    check's timeout, whatever the phase of the periodic checks."""
    h = ClusterHealth()
    assert h.bound() <= 2.0
    for last_start in (0.0, 0.1, 0.2, 0.24):
        h = ClusterHealth()
        h.check_started(last_start)
        h.check_answered(last_start + 0.001)  # the cluster answered, then died
        page_at = 0.25
        starts = h.next_check(page_at, asked=True)
        h.check_started(starts)
        fails = starts + h.check_timeout
        h.check_failed(fails, "no answer")
        assert fails - page_at <= h.bound()


def test_timings_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        ClusterHealth(interval=0)
    with pytest.raises(ValueError, match="positive"):
        ClusterHealth(check_timeout=-1)
