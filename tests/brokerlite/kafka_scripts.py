"""What the tests that run Kafka's scripts against brokerlite and Kafka 3.9 share
(tests/brokerlite/test_kafka_scripts*.py): the scripts' main classes, running a
list of steps against both brokers at once (one ScriptRunner JVM per broker,
kept for a test's later lists by a :class:`java_harness.ScriptSession`),
and the normalising of what must differ between two brokers made the same.

A step is ``(name, main class, arguments, standard input or None)``; a run
answers each step's outcome (``exit``, ``out``, ``err``) by name.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from typing import Any

import java_harness
import pytest
from kafka_peers import KAFKA_3, KAFKA_4, SKIP_ENV, missing

TOOLS = "org.apache.kafka.tools."
TOPICS = TOOLS + "TopicCommand"
CONFIGS = TOOLS + "ConfigCommand"
GROUPS = TOOLS + "consumer.group.ConsumerGroupCommand"
ACLS = TOOLS + "AclCommand"
TOKENS = TOOLS + "DelegationTokenCommand"
CONSOLE_PRODUCER = TOOLS + "ConsoleProducer"
CONSOLE_CONSUMER = TOOLS + "consumer.ConsoleConsumer"
REASSIGN = TOOLS + "reassign.ReassignPartitionsCommand"
ELECT = TOOLS + "LeaderElectionCommand"

Step = tuple[str, str, list[str], str | None]
Outcome = dict[str, Any]


def require_kafka() -> None:
    """Fail (unless Kafka's tests are opted out of) when Kafka's jars are missing."""
    if os.environ.get(SKIP_ENV) != "1":
        why = missing("kafka", KAFKA_4) or missing("kafka", KAFKA_3)
        if why is not None:
            pytest.fail(why, pytrace=False)


def run_steps(
    steps: list[Step], timeout: float = 480, session: java_harness.ScriptSession | None = None
) -> dict[str, Outcome]:
    """Each step's outcome by name, all run in one JVM (ScriptRunner): the
    ``session``'s, or one of their own."""
    commands = [(main, args, stdin) for _, main, args, stdin in steps]
    if session is None:
        outcomes = java_harness.run_scripts(commands, timeout=timeout)
    else:
        outcomes = session.run(commands, timeout=timeout)
    return {name: outcome for (name, *_), outcome in zip(steps, outcomes, strict=True)}


def on_both(
    brokerlite: Callable[[], dict[str, Outcome]], kafka: Callable[[], dict[str, Outcome]]
) -> dict[str, tuple[Outcome, Outcome]]:
    """Run the two at once (Kafka's in a thread): each step's (brokerlite's, Kafka's).

    What made Kafka's side fail is not lost with its thread: it is raised from
    the assertion (chained, its traceback with it), after brokerlite's side ran.
    """
    found: dict[str, dict[str, Outcome]] = {}
    failed: list[BaseException] = []

    def on_kafka() -> None:
        try:
            found["kafka"] = kafka()
        except BaseException as exc:  # kept for the caller's thread: raised there
            failed.append(exc)

    thread = threading.Thread(target=on_kafka, name="scripts-on-kafka")
    thread.start()
    found["brokerlite"] = brokerlite()
    thread.join(500)
    assert not thread.is_alive(), "the scripts against Kafka 3.9 did not finish"
    if failed:
        raise AssertionError(f"the scripts against Kafka 3.9 failed: {failed[0]!r}") from failed[0]
    lost = {"exit": "lost", "out": "", "err": ""}
    names = {**found["brokerlite"], **found["kafka"]}
    return {
        name: (found["brokerlite"].get(name, lost), found["kafka"].get(name, lost))
        for name in names
    }


def normalise(text: str) -> str:
    """What must differ between two brokers made the same."""
    text = re.sub(r"TopicId: \S+", "TopicId: <id>", text)
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text)
    text = re.sub(r'"logDir":"[^"]*"', '"logDir":"<dir>"', text)
    text = re.sub(r'"size":[1-9]\d*', '"size":"<bytes>"', text)
    # Deliberate (docs/brokerlite.md): brokerlite serves DescribeTopicPartitions,
    # whose ELR lists are empty; against Kafka 3.9 the tool falls back to Metadata.
    text = text.replace("\tElr: \tLastKnownElr: ", "\tElr: N/A\tLastKnownElr: N/A")
    # kafka-topics prints a topic's configs in the order DescribeConfigs lists
    # them, which in Kafka 3.9 is a Scala hash map's (ConfigHelper): no order to match.
    return re.sub(
        r"Configs: (\S*)", lambda m: "Configs: " + ",".join(sorted(m[1].split(","))), text
    )


def assert_same(name: str, ours: Outcome, kafka: Outcome, pick: Callable[[str], str] = str) -> None:
    """The step's exit status and output are Kafka's, once normalised."""
    assert ours["exit"] == kafka["exit"], (name, ours, kafka)
    assert normalise(pick(ours["out"])) == normalise(pick(kafka["out"])), name
    assert normalise(pick(ours["err"])) == normalise(pick(kafka["err"])), name
