"""confluent-kafka's ``AdminClient`` (``confluent_kafka.admin``) over trafka's
blocking admin client: each call returns a dict of
:class:`concurrent.futures.Future`, one per resource, whose exception is a
:class:`KafkaException` with the broker's code (``TOPIC_ALREADY_EXISTS``...).

Rules:

* The work is done in a thread of the admin client's own, so the call
  returns at once, as confluent-kafka's; each resource is asked for on its
  own, so that one resource's error is its future's alone.
* The configuration's callbacks (``error_cb``: ``_TRANSPORT`` for a broker or
  bootstrap address out of reach, ``_ALL_BROKERS_DOWN`` once every one is;
  ``stats_cb``, ``throttle_cb``) are served by :meth:`AdminClient.poll`, as
  confluent-kafka's.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from trafka.sdk import NewPartitions as _NewPartitions
from trafka.sdk import NewTopic as _NewTopic
from trafka.sdk.blocking import Admin as _Admin

from ._callbacks import Served, translate_config
from ._errors import KafkaException, error_of

__all__ = ["AdminClient", "NewPartitions", "NewTopic"]


class NewTopic:
    """A topic to create: confluent-kafka's ``NewTopic``."""

    def __init__(
        self,
        topic: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        replica_assignment: Any = None,
        config: dict[str, str] | None = None,
    ) -> None:
        self.topic = topic
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.replica_assignment = replica_assignment
        self.config = dict(config or {})


class NewPartitions:
    """Partitions to add to a topic: confluent-kafka's ``NewPartitions``."""

    def __init__(self, topic: str, new_total_count: int, replica_assignment: Any = None) -> None:
        self.topic = topic
        self.new_total_count = new_total_count
        self.replica_assignment = replica_assignment


class AdminClient:
    """confluent-kafka's ``AdminClient(config)``."""

    def __init__(self, conf: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._served = Served()
        try:
            self._admin = _Admin(translate_config({**(conf or {}), **kwargs}, self._served))
        except Exception as exc:
            raise KafkaException(error_of(exc)) from None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trafka-admin-compat")

    def _each(self, items: dict[str, Any], call: Any) -> dict[str, Future[None]]:
        futures: dict[str, Future[None]] = {}
        for name, item in items.items():
            futures[name] = self._pool.submit(self._run, call, item)
        return futures

    @staticmethod
    def _run(call: Any, item: Any) -> None:
        try:
            call(item)
        except Exception as exc:
            raise KafkaException(error_of(exc)) from None

    def create_topics(self, new_topics: list[NewTopic], **kwargs: Any) -> dict[str, Future[None]]:
        for t in new_topics:  # librdkafka's rules for an assignment, raised here as there
            if t.replica_assignment is not None and t.num_partitions == -1:
                raise ValueError(
                    "Specifying a default partition count and a replica assignment are "
                    "mutually exclusive"
                )
            if t.replica_assignment is not None and t.replication_factor != -1:
                raise ValueError(
                    "Specifying a replication factor and a replica assignment are "
                    "mutually exclusive"
                )

        def create(t: NewTopic) -> None:
            if t.replica_assignment is None:
                spec = _NewTopic(t.topic, t.num_partitions, t.replication_factor, t.config)
            else:  # (librdkafka sends no counts with an assignment)
                placed = dict(enumerate(t.replica_assignment))
                spec = _NewTopic(t.topic, configs=t.config, replica_assignments=placed)
            self._admin.create_topics([spec])

        return self._each({t.topic: t for t in new_topics}, create)

    def delete_topics(self, topics: list[str], **kwargs: Any) -> dict[str, Future[None]]:
        return self._each({t: t for t in topics}, lambda t: self._admin.delete_topics([t]))

    def create_partitions(
        self, new_partitions: list[NewPartitions], **kwargs: Any
    ) -> dict[str, Future[None]]:
        def add(p: NewPartitions) -> None:
            self._admin.create_partitions(
                {p.topic: _NewPartitions(p.new_total_count, p.replica_assignment)}
            )

        return self._each({p.topic: p for p in new_partitions}, add)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        counts = self._admin.list_topics()
        chosen = counts if topic is None else {topic: counts[topic]} if topic in counts else {}
        return ClusterMetadata(
            {name: TopicMetadata(name, dict.fromkeys(range(n))) for name, n in chosen.items()}
        )

    def poll(self, timeout: float | None = None) -> int:
        """Serve the configuration's callbacks due (``error_cb``...), waiting up to
        ``timeout`` s (None or negative: until one) for a first; how many were served."""
        return self._served.serve(None if timeout is None or timeout < 0 else timeout)

    def close(self) -> None:
        """Not in confluent-kafka: close trafka's admin client."""
        self._pool.shutdown()
        self._admin.close()


class TopicMetadata:
    """A topic of :class:`ClusterMetadata`: ``topic`` and ``partitions`` (by id)."""

    def __init__(self, topic: str, partitions: dict[int, Any]) -> None:
        self.topic = topic
        self.partitions = partitions
        self.error = None


class ClusterMetadata:
    """What ``list_topics()`` returns: ``topics``, by name."""

    def __init__(self, topics: dict[str, TopicMetadata]) -> None:
        self.topics = topics
