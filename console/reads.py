"""What several of the console's pages ask the cluster alike: a topic's
metadata, partitions' offsets and sizes, run at once where they can.

Rules:

* Only the Kafka protocol reaches the cluster: any Kafka works, not only
  brokerlite. Calls that do not depend on each other run at once
  (:func:`gather`), and the first to fail is raised as itself.
* A topic that does not exist is :class:`NotFound`; a partition a topic lacks,
  asked for by a person, is :class:`~.model.InputError`; the cluster's own
  refusals are the SDK's errors, unchanged.
* A partition without a leader (its replicas' brokers down), or whose leader
  cannot be reached, does not take its page down: its offsets are looked up
  partially (:meth:`~trafka.sdk.admin.Admin.list_offsets` ``partial=True``)
  and left out, so that the page shows them unknown; sizes that cannot be
  asked (no rights, a broker out of reach) are unknown too.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from trafka.codec import ErrorCode, KafkaError, TrafkaError
from trafka.sdk import AdminConfig, ClientConfig, ConsumerConfig, ProducerConfig
from trafka.sdk.admin import Admin
from trafka.sdk.fetcher import TopicPartition
from trafka.sdk.metadata import TopicInfo

from . import model
from .model import InputError

__all__ = ["ClusterReads", "NotFound", "client_settings", "gather"]

log = logging.getLogger("trafka.console")


class NotFound(Exception):
    """The topic or group a page names does not exist."""


async def gather(*calls: Callable[[], Awaitable[Any]]) -> list[Any]:
    """The results of ``calls``, run at once. The first to fail cancels the
    others and is raised as itself, not inside an ExceptionGroup, so that a
    page can tell a refusal from an unreachable cluster."""
    results: list[Any] = [None] * len(calls)

    async def one(i: int) -> None:
        results[i] = await calls[i]()

    try:
        async with anyio.create_task_group() as tg:
            for i in range(len(calls)):
                tg.start_soon(one, i)
    except BaseExceptionGroup as group:
        raise _first_real(group) from None
    return results


def _first_real(group: BaseExceptionGroup[Any]) -> BaseException:
    cancelled = anyio.get_cancelled_exc_class()
    for exc in group.exceptions:
        inner: BaseException = exc
        if isinstance(inner, BaseExceptionGroup):
            inner = _first_real(inner)
        if not isinstance(inner, cancelled | BaseExceptionGroup):
            return inner
    return group


def client_settings(cls: type[ClientConfig], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``settings`` that ``cls`` takes: the console's one set of
    client settings serves its admin client, consumers and producer, each
    taking its own. A key that none of them knows is kept, so that the client
    refuses it by name rather than the console dropping it."""
    kinds: tuple[type[ClientConfig], ...] = (AdminConfig, ConsumerConfig, ProducerConfig)
    fields = {k: {f.name for f in dataclasses.fields(k)} for k in kinds}
    out = {}
    for key, value in settings.items():
        name = key.strip().lower().replace(".", "_").replace("-", "_")
        if name in fields[cls] or not any(name in names for names in fields.values()):
            out[key] = value
    return out


class ClusterReads:
    """The lookups the console's pages share, through ``admin``."""

    def __init__(self, admin: Admin) -> None:
        self.admin = admin

    async def all_topics(self) -> dict[str, Any]:
        """Every topic's metadata, the internal ones included."""
        names = await self.admin.list_topics(include_internal=True)
        return await self.admin.describe_topics(names) if names else {}

    async def topic_info(self, name: str) -> TopicInfo:
        """The topic's metadata (:class:`NotFound` when it does not exist)."""
        try:
            return (await self.admin.describe_topics([name]))[name]
        except KafkaError as exc:
            if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise NotFound(f"no topic named {name!r}") from None
            raise

    async def offsets_and_sizes(
        self, tps: list[TopicPartition], log_dirs_for: list[TopicPartition] | None
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[TopicPartition, int]]:
        """The log start and end offsets of ``tps`` and their sizes, from the
        log directories of ``log_dirs_for`` (None: every partition's)."""
        if not tps:
            return {}, {}, {}

        async def sizes() -> dict[TopicPartition, int]:
            try:
                dirs = await self.admin.describe_log_dirs(log_dirs_for)
            except TrafkaError as exc:  # no rights, or a broker out of reach: unknown
                log.info("no partition sizes: %s", exc)
                return {}
            return model.partition_sizes(dirs)

        starts, ends, found = await gather(
            lambda: self.offsets(tps, "earliest"), lambda: self.offsets(tps, "latest"), sizes
        )
        return starts, ends, found

    async def offsets(
        self, tps: list[TopicPartition], spec: str | int
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """``list_offsets`` of what can be answered: a partition whose leader is
        gone or out of reach is left out (its offsets are unknown)."""
        if not tps:
            return {}
        try:
            found = await self.admin.list_offsets(dict.fromkeys(tps, spec), partial=True)
        except KafkaError as exc:
            if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
            # A topic deleted meanwhile (the admin client looks a partition past
            # its cached count up again before refusing it): each topic on its
            # own, and a topic refused so has its offsets unknown for now.
            by_topic: dict[str, list[TopicPartition]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp)
            if len(by_topic) == 1:
                log.info("offsets of %s unknown: %s", tps[0].topic, exc)
                return {}
            each: dict[TopicPartition, tuple[int, int] | None] = {}
            for some in by_topic.values():
                each.update(await self.offsets(some, spec))
            return each
        for tp, hit in found.items():
            if isinstance(hit, TrafkaError):
                log.info("offsets of %s-%s unknown: %s", tp.topic, tp.partition, hit)
        return {tp: hit for tp, hit in found.items() if not isinstance(hit, TrafkaError)}

    async def ends(self, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
        """The log end offsets of ``tps`` that can be answered."""
        return await self.offsets(tps, "latest")

    async def partition_count(self, topic: str, partition: int | None = None) -> int:
        """How many partitions ``topic`` has (a 404 page when it does not exist);
        :class:`~.model.InputError` when it lacks ``partition``."""
        count = len((await self.topic_info(topic)).partitions)
        if partition is not None and partition >= count:
            raise InputError(
                f"partition: {topic!r} has partitions 0 to {count - 1}, not {partition}"
            )
        return count

    async def partitions(self, topic: str, partition: int | None) -> list[TopicPartition]:
        """The partitions a page names: ``partition`` of ``topic``, or all of
        them when None (checked as :meth:`partition_count` checks them)."""
        count = await self.partition_count(topic, partition)
        wanted = range(count) if partition is None else [partition]
        return [TopicPartition(topic, p) for p in wanted]
