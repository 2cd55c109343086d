"""Generated differential conversations (issue #61): hypothesis makes sequences
of produce, fetch, list-offsets, offset commit/fetch and group membership
requests; each request goes to Kafka 3.9 (the reference) and to brokerlite in
turn, and their answers are compared field by field as the sequence goes
(:mod:`differential`). Each example uses fresh topic and group names, so a
failing sequence shrinks to the few requests that show the difference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from differential import Talk, compare
from differential_requests import TS, Kafka, records, warm
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

VALUES = st.lists(st.binary(max_size=64), min_size=1, max_size=4)
PARTITION = st.sampled_from([0, 1])


def machine(reference: str, peer: str) -> type[RuleBasedStateMachine]:
    class Conversation(RuleBasedStateMachine):
        """One generated conversation, on both brokers at once."""

        def __init__(self) -> None:
            super().__init__()
            self.talks = [Talk(reference), Talk(peer)]
            self.brokers = [Kafka(t) for t in self.talks]
            # per broker: the member id and generation it gave (ids differ)
            self.member = ["", ""]
            self.generation = [-1, -1]
            self.both(lambda k, i: k.create(k.talk.name("topic"), 2))

        def both(self, ask: Callable[[Kafka, int], Any]) -> list[Any]:
            answers = [ask(k, i) for i, k in enumerate(self.brokers)]
            ref, got = (t.transcript for t in self.talks)
            lines = compare(ref[-1:], got[-1:])
            if lines:
                lines += [f"reference: {ref[-1]!r}", f"peer: {got[-1]!r}"]
            assert not lines, "answers differ from the reference:\n" + "\n".join(lines)
            return answers

        def teardown(self) -> None:
            for talk in self.talks:
                talk.close()

        @rule(
            values=VALUES,
            partition=PARTITION,
            acks=st.sampled_from([1, -1, 0]),
            keyed=st.booleans(),
        )
        def produce(self, values: list[bytes], partition: int, acks: int, keyed: bool) -> None:
            keys = [v[:3] for v in values] if keyed else None
            blob = records(list(values), keys=list(keys) if keys else None)
            self.both(
                lambda k, i: k.produce(k.talk.name("topic"), blob, acks=acks, partition=partition)
            )

        @rule(offset=st.integers(-1, 12), partition=PARTITION, isolation=st.sampled_from([0, 1]))
        def fetch(self, offset: int, partition: int, isolation: int) -> None:
            self.both(
                lambda k, i: k.fetch(
                    k.talk.name("topic"), offset, partition=partition, isolation=isolation
                )
            )

        @rule(ts=st.sampled_from([-2, -1, -3, TS, TS + 1, TS + 3, TS + 10]), partition=PARTITION)
        def list_offsets(self, ts: int, partition: int) -> None:
            self.both(lambda k, i: k.list_offsets(k.talk.name("topic"), ts, partition=partition))

        @rule(offset=st.integers(0, 12), partition=PARTITION)
        def commit(self, offset: int, partition: int) -> None:
            self.both(
                lambda k, i: k.commit(
                    k.talk.name("group"),
                    k.talk.name("topic"),
                    offset,
                    generation=self.generation[i],
                    member=self.member[i],
                    partition=partition,
                )
            )

        @rule(partition=PARTITION)
        def offset_fetch(self, partition: int) -> None:
            self.both(
                lambda k, i: k.offsets(
                    k.talk.name("group"), k.talk.name("topic"), partition=partition
                )
            )

        @rule()
        def join(self) -> None:
            answers = self.both(lambda k, i: k.join(k.talk.name("group"), self.member[i]))
            for i, answer in enumerate(answers):
                if answer.member_id:
                    self.member[i] = answer.member_id
                if answer.error_code == 0:
                    self.generation[i] = answer.generation_id

        @precondition(lambda self: self.generation[0] >= 0)
        @rule()
        def sync(self) -> None:
            self.both(lambda k, i: k.sync(k.talk.name("group"), self.generation[i], self.member[i]))

        @rule()
        def heartbeat(self) -> None:
            self.both(
                lambda k, i: k.heartbeat(k.talk.name("group"), self.generation[i], self.member[i])
            )

        @precondition(lambda self: bool(self.member[0]))
        @rule()
        def leave(self) -> None:
            self.both(lambda k, i: k.leave(k.talk.name("group"), self.member[i]))
            self.member, self.generation = ["", ""], [-1, -1]

    return Conversation


@pytest.mark.slow
@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "Generated produce/fetch/offsets/group sequences")
def test_generated_conversations(kafka3: Any, peer: Any) -> None:
    """brokerlite answers every generated sequence as Kafka 3.9 does."""
    warm(kafka3.bootstrap_servers)
    warm(peer.bootstrap_servers)
    run_state_machine_as_test(
        machine(kafka3.bootstrap_servers, peer.bootstrap_servers),
        settings=settings(
            max_examples=15,
            stateful_step_count=10,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
