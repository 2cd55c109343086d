"""kafka_scripts.on_both, the runner of the scripts' tests against brokerlite
and Kafka 3.9 at once: what failed on Kafka's side (run in a thread) reaches
the test, with its traceback, instead of a bare "failed (see the log)" that
named nothing (tests/brokerlite/test_kafka_scripts_cluster.py once failed so)."""

from __future__ import annotations

import traceback

import pytest
from kafka_scripts import on_both


def test_each_steps_outcomes_are_paired() -> None:
    ours = {"a": {"exit": 0, "out": "x", "err": ""}}
    theirs = {"a": {"exit": 1, "out": "y", "err": ""}, "b": {"exit": 0, "out": "", "err": ""}}
    found = on_both(lambda: ours, lambda: theirs)
    assert found["a"] == (ours["a"], theirs["a"])
    assert found["b"] == ({"exit": "lost", "out": "", "err": ""}, theirs["b"])


def _kafkas_side() -> dict[str, dict[str, object]]:
    raise TimeoutError("the topic never reached node 2")


def test_what_failed_on_kafkas_side_is_raised_with_its_traceback() -> None:
    ran = []
    with pytest.raises(AssertionError, match="the topic never reached node 2") as caught:
        on_both(lambda: ran.append("brokerlite") or {}, _kafkas_side)
    assert ran == ["brokerlite"]  # brokerlite's side still ran to its end
    cause = caught.value.__cause__
    assert isinstance(cause, TimeoutError)
    frames = [frame.name for frame in traceback.extract_tb(cause.__traceback__)]
    assert "_kafkas_side" in frames
