"""Answers of the share-group offsets admin that may wait for share state (KIP-932).

DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets and
DeleteGroups read and change share state through the share-offsets port
(:mod:`trafka.brokerlite.shares.offsets_port`). On a single node its jobs are
done at once; in a cluster they are requests to the share coordinators, and the
answer waits for them.

Rules:

* A handler builds its answer as a :class:`Later`: the port's jobs and how to
  build the answer once they are done (``then`` adds a step, such as the
  authorization refusals of the topics left out). One code path serves both
  implementations: a Later whose jobs are done is built at once.
* A request whose jobs are not done within :data:`ADMIN_WAIT_MS` (Kafka's
  request timeout) is answered with its API's refusal, REQUEST_TIMED_OUT, and
  its jobs are abandoned (nothing more is sent for them; a change already made
  stays made, as when Kafka's group coordinator times out on its persister).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from trafka.codec.errors import ErrorCode

from ..shares.offsets_port import ADMIN_WATCH, Job
from ._base import RequestContext

if TYPE_CHECKING:
    from trafka.brokerlite.shares.offsets_port import ShareOffsetsPort

__all__ = ["ADMIN_WAIT_MS", "Later", "answer"]

#: The longest an answer waits for its share-state jobs (Kafka's request.timeout.ms).
ADMIN_WAIT_MS = 30_000


class Later:
    """An answer built once ``jobs`` are done."""

    def __init__(self, jobs: Sequence[Job], build: Callable[[], Any]) -> None:
        self.jobs = list(jobs)
        self.build = build

    @classmethod
    def now(cls, value: Any) -> Later:
        return cls([], lambda: value)

    @classmethod
    def all(cls, laters: Iterable[Later], combine: Callable[[list[Any]], Any]) -> Later:
        parts = list(laters)
        return cls(
            [job for part in parts for job in part.jobs],
            lambda: combine([part.build() for part in parts]),
        )

    def then(self, step: Callable[[Any], Any]) -> Later:
        build = self.build
        return Later(self.jobs, lambda: step(build()))

    @property
    def done(self) -> bool:
        return all(job.done for job in self.jobs)


def answer(ctx: RequestContext, later: Later, refusal: Callable[[ErrorCode], Any]) -> Any:
    """The answer now if its jobs are done, else the request parked until they are."""
    if later.done:
        return later.build()
    return ctx.park(_JobsDone(ctx.share_offsets, later, refusal, ctx.mono_ms + ADMIN_WAIT_MS))


class _JobsDone:
    """A request waiting for its share-state jobs."""

    def __init__(
        self,
        port: ShareOffsetsPort,
        later: Later,
        refusal: Callable[[ErrorCode], Any],
        deadline_ms: int,
    ) -> None:
        self._port = port
        self._later = later
        self._refusal = refusal
        self.deadline_ms = deadline_ms
        self.watches = frozenset({ADMIN_WATCH})

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return self._later.done

    def complete(self, now_ms: int) -> Any:
        if self._later.done:
            return self._later.build()
        for job in self._later.jobs:
            self._port.abandon(job)
        return self._refusal(ErrorCode.REQUEST_TIMED_OUT)
