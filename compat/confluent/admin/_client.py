"""confluent-kafka's ``AdminClient`` over trafka's blocking admin client.

Rules:

* A call checks its arguments first, as confluent-kafka does (the same
  TypeError or ValueError: :mod:`._checks`), then returns at once: a dict of
  :class:`concurrent.futures.Future` (one per topic, resource, group...) or
  one future. Each resource is asked for on its own, in a worker thread, so
  that one resource's error is its future's alone; a future fails with a
  :class:`KafkaException` carrying librdkafka's code (a broker's code,
  ``_TIMED_OUT`` past the call's ``request_timeout``).
* ``request_timeout`` defaults to ``socket.timeout.ms``, as librdkafka's.
  With no ``bootstrap.servers`` there is no broker to ask: every future
  fails with ``_TIMED_OUT`` at its bound, as librdkafka's do.
* The configuration's callbacks (``error_cb``, ``stats_cb``, ``throttle_cb``,
  and with ``debug`` the ``logger``'s first line, ``INIT``) are served by
  :meth:`AdminClient.poll`; an exception a callback raises leaves ``poll``.
* After ``close()`` (or a ``with`` block) every call raises RuntimeError, as
  does a call on an instance whose ``__init__`` never ran.
"""

from __future__ import annotations

import re
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from trafka.sdk.blocking import Admin as _Admin
from trafka.sdk.config import AdminConfig, make_config

from .._callbacks import Served, translate_config
from .._errors import KafkaError, KafkaException, error_of, internal
from .._logs import queue_logs
from .._model import TopicCollection
from .._types import TopicPartition
from . import _checks as check
from . import _work as work
from ._acl import AclBinding, AclBindingFilter
from ._config import ConfigResource
from ._metadata import (
    BrokerMetadata,
    ClusterMetadata,
    GroupMember,
    GroupMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from ._models import ListConsumerGroupsResult, NewPartitions, NewTopic, spec_number

__all__ = ["AdminClient"]

#: A resource's work: called with the call's bound in ms, returns its result.
Job = Callable[[int], Any]
_TIMEOUT = ("request_timeout",)
_OPERATION = ("request_timeout", "operation_timeout")
_CLOSED = "AdminClient has been closed"
_HANDLE_CLOSED = "Handle has been closed"


class AdminClient:
    """confluent-kafka's ``AdminClient(conf)``: ``conf`` is librdkafka's settings."""

    _admin: Any = None
    _closed = True  # (an instance whose __init__ never ran is closed)

    def __init__(self, conf: dict[str, Any], **kwargs: Any) -> None:
        config = {**conf, **kwargs}
        self._served = Served()
        queue_logs(config, self._served, "admin")
        translated = translate_config(config, self._served)
        self._default_s = float(config.get("socket.timeout.ms", 60000)) / 1000
        try:
            if config.get("bootstrap.servers") or config.get("metadata.broker.list"):
                self._admin = _Admin(translated)
            else:  # no broker to ask; the settings are still checked
                make_config(AdminConfig, translated, {})
        except Exception as exc:
            raise KafkaException(error_of(exc)) from None
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="trafka-admin-compat")
        self._closed = False

    # -- the machinery -----------------------------------------------------------------------

    def _open(self, message: str = _CLOSED) -> None:
        if self._closed:
            raise RuntimeError(message)

    def _timeout(self, kwargs: dict[str, Any], allowed: tuple[str, ...]) -> float:
        check.check_options(kwargs, allowed)
        seconds = check.option_seconds(kwargs, "request_timeout", self._default_s)
        if "operation_timeout" in kwargs:
            check.option_seconds(kwargs, "operation_timeout", 0)
        return seconds

    def _start(
        self, jobs: dict[Any, Job | KafkaException], seconds: float
    ) -> dict[Any, Future[Any]]:
        """A running future per key, settled by its job (or failed with the
        exception given instead)."""
        futures: dict[Any, Future[Any]] = {}
        for key, job in jobs.items():
            future: Future[Any] = Future()
            future.set_running_or_notify_cancel()
            futures[key] = future
            if isinstance(job, KafkaException):
                future.set_exception(job)
            elif self._admin is None:
                timer = threading.Timer(seconds, _timed_out, (future,))
                timer.daemon = True
                timer.start()
            else:
                self._pool.submit(_settle, future, job, int(seconds * 1000))
        return futures

    def _one(self, job: Job, seconds: float) -> Future[Any]:
        return self._start({None: job}, seconds)[None]

    # -- topics and partitions ---------------------------------------------------------------

    def create_topics(self, new_topics: list[NewTopic], **kwargs: Any) -> dict[str, Future[None]]:
        """Create topics: a future per topic name (None once created)."""
        names = [t.topic for t in new_topics]
        if not names:
            raise ValueError("Expected non-empty list of NewTopic objects")
        self._open()
        seconds = self._timeout(kwargs, ("validate_only", *_OPERATION))
        validate = check.option_bool(kwargs, "validate_only")
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
        jobs: dict[Any, Job | KafkaException] = {}
        for t in new_topics:
            jobs[t.topic] = _bind(work.create_topic, self._admin, t, validate)
        return self._start(jobs, seconds)

    def delete_topics(self, topics: list[str], **kwargs: Any) -> dict[str, Future[None]]:
        """Delete topics: a future per name."""
        if not isinstance(topics, list):
            if isinstance(topics, str):
                raise TypeError(f"argument 1 must be list, not {type(topics).__name__}")
            list(topics)  # (TypeError: not iterable)
            raise TypeError(f"argument 1 must be list, not {type(topics).__name__}")
        if not topics:
            raise ValueError("Expected non-empty list of topic strings")
        for t in topics:
            if t is None:
                raise ValueError("Expected list of topic strings, not NoneType")
        self._open()
        seconds = self._timeout(kwargs, _OPERATION)
        jobs: dict[Any, Job | KafkaException] = {}
        for t in topics:
            jobs[t] = _bind(_delete_topic, self._admin, str(t))
        return self._start(jobs, seconds)

    def create_partitions(
        self, new_partitions: list[NewPartitions], **kwargs: Any
    ) -> dict[str, Future[None]]:
        """Add partitions to topics: a future per topic."""
        names = [p.topic for p in new_partitions]
        if not names:
            raise ValueError("Expected non-empty list of NewPartitions objects")
        self._open()
        seconds = self._timeout(kwargs, ("validate_only", *_OPERATION))
        validate = check.option_bool(kwargs, "validate_only")
        jobs: dict[Any, Job | KafkaException] = {}
        for p in new_partitions:
            jobs[p.topic] = _bind(work.create_partitions, self._admin, p, validate)
        return self._start(jobs, seconds)

    def describe_topics(self, topics: TopicCollection, **kwargs: Any) -> dict[str, Future[Any]]:
        """Describe topics: a future per name (a ``TopicDescription``)."""
        if not isinstance(topics, TopicCollection):
            raise TypeError("Expected input to be instance of TopicCollection")
        if not isinstance(topics.topic_names, list):
            raise TypeError("Expected list of topic names to be described")
        self._open()
        seconds = self._timeout(kwargs, ("include_authorized_operations", *_TIMEOUT))
        check.option_bool(kwargs, "include_authorized_operations")
        names = check.check_topic_names(topics.topic_names)
        return self._start(_unique(names, self._admin, work.describe_topic, "topics"), seconds)

    def describe_cluster(self, **kwargs: Any) -> Future[Any]:
        """Describe the cluster: a future of a ``DescribeClusterResult``."""
        self._open()
        seconds = self._timeout(kwargs, ("include_authorized_operations", *_TIMEOUT))
        check.option_bool(kwargs, "include_authorized_operations")
        return self._one(_bind(work.describe_cluster, self._admin), seconds)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """The cluster's brokers and topics (or ``topic`` alone), as ``ClusterMetadata``."""
        self._open(_HANDLE_CLOSED)
        if self._admin is None:
            raise KafkaException(
                KafkaError(
                    internal("_TRANSPORT"),
                    "Failed to get metadata: Local: Broker transport failure",
                )
            )
        ms = self._call_ms(timeout)
        try:
            return _cluster_metadata(self._admin, topic, ms)
        except Exception as exc:
            raise KafkaException(error_of(exc)) from None

    def _call_ms(self, timeout: float | None) -> int:
        return int((self._default_s if timeout is None or timeout < 0 else timeout) * 1000)

    def cluster_id(self, timeout: float = -1) -> str | None:
        """The cluster's id."""
        self._open(_HANDLE_CLOSED)
        ms = self._call_ms(timeout)
        if self._admin is None:
            time.sleep(ms / 1000)
            raise KafkaException(
                KafkaError(internal("_TIMED_OUT"), "Failed to retrieve cluster id")
            )
        try:
            found: str | None = self._admin.describe_cluster(timeout_ms=ms).cluster_id
        except Exception as exc:
            raise KafkaException(error_of(exc)) from None
        return found

    # -- configs -----------------------------------------------------------------------------

    def describe_configs(
        self, resources: list[ConfigResource], **kwargs: Any
    ) -> dict[ConfigResource, Future[Any]]:
        """Describe the configs of resources: a future per resource (a dict of
        ``ConfigEntry`` by name)."""
        found = check.check_configs(resources, ValueError)
        self._open()
        seconds = self._timeout(kwargs, _TIMEOUT)
        return self._start(_unique(found, self._admin, work.describe_configs, "resources"), seconds)

    def alter_configs(
        self, resources: list[ConfigResource], **kwargs: Any
    ) -> dict[ConfigResource, Future[None]]:
        """Give resources the settings of their ``set_config`` (deprecated, as in
        confluent-kafka: use :meth:`incremental_alter_configs`)."""
        warnings.warn(
            "alter_configs has been deprecated. Use incremental_alter_configs instead.",
            category=DeprecationWarning,
            stacklevel=2,
        )
        found = check.check_configs(resources, ValueError)
        self._open()
        seconds = self._timeout(kwargs, ("validate_only", *_TIMEOUT))
        check.option_bool(kwargs, "validate_only")
        return self._start(_unique(found, self._admin, work.alter_configs, "resources"), seconds)

    def incremental_alter_configs(
        self, resources: list[ConfigResource], **kwargs: Any
    ) -> dict[ConfigResource, Future[None]]:
        """Make each resource's ``incremental_configs`` changes: a future per resource."""
        found = check.check_configs(resources, TypeError)
        self._open()
        seconds = self._timeout(kwargs, ("validate_only", *_TIMEOUT))
        check.option_bool(kwargs, "validate_only")
        jobs: dict[Any, Job | KafkaException] = {}
        for r in found:
            check.check_incremental(r)
            if r in jobs:
                jobs[r] = work.fail("_INVALID_ARG", "Duplicate ConfigResource found")
                continue
            names = [e.name for e in r.incremental_configs]
            if len(set(names)) != len(names):
                jobs[r] = work.fail("_INVALID_ARG", "Duplicate ConfigEntry found")
            else:
                jobs[r] = _bind(work.incremental_alter, self._admin, r)
        return self._start(jobs, seconds)

    # -- ACLs --------------------------------------------------------------------------------

    def create_acls(self, acls: list[AclBinding], **kwargs: Any) -> dict[AclBinding, Future[None]]:
        """Create ACLs: a future per binding."""
        found = check.check_acls(acls, AclBinding, "bindings")
        self._open()
        seconds = self._timeout(kwargs, _TIMEOUT)
        return self._start({b: _bind(work.create_acl, self._admin, b) for b in found}, seconds)

    def describe_acls(self, acl_binding_filter: AclBindingFilter, **kwargs: Any) -> Future[Any]:
        """The ACLs a filter matches: a future of a list of ``AclBinding``."""
        self._open()
        if not isinstance(acl_binding_filter, AclBindingFilter):
            raise TypeError("Expected an AclBindingFilter object")
        seconds = self._timeout(kwargs, _TIMEOUT)
        return self._one(_bind(work.describe_acls, self._admin, acl_binding_filter), seconds)

    def delete_acls(
        self, acl_binding_filters: list[AclBindingFilter], **kwargs: Any
    ) -> dict[AclBindingFilter, Future[Any]]:
        """Delete the ACLs each filter matches: a future per filter (the ACLs deleted)."""
        found = check.check_acls(acl_binding_filters, AclBindingFilter, "binding filters")
        self._open()
        seconds = self._timeout(kwargs, _TIMEOUT)
        return self._start({f: _bind(work.delete_acls, self._admin, f) for f in found}, seconds)

    # -- groups ------------------------------------------------------------------------------

    def list_consumer_groups(self, **kwargs: Any) -> Future[ListConsumerGroupsResult]:
        """The consumer groups (``states`` and ``types``: sets to keep): a future
        of a ``ListConsumerGroupsResult``, whose ``errors`` hold what failed."""
        states, types = check.check_states(kwargs)
        self._open()
        seconds = self._timeout(kwargs, ("states", "types", *_TIMEOUT))
        out: Future[ListConsumerGroupsResult] = Future()
        out.set_running_or_notify_cancel()
        inner = self._one(_bind(work.list_groups, self._admin, states, types), seconds)

        def settle(f: Future[Any]) -> None:
            exc = f.exception()
            if exc is None:
                out.set_result(ListConsumerGroupsResult(f.result(), []))
            else:
                out.set_result(ListConsumerGroupsResult([], [error_of(exc)]))

        inner.add_done_callback(settle)
        return out

    def describe_consumer_groups(
        self, group_ids: list[str], **kwargs: Any
    ) -> dict[str, Future[Any]]:
        """Describe groups: a future per group id (a ``ConsumerGroupDescription``)."""
        check.check_group_ids(group_ids, "described", False)
        self._open()
        seconds = self._timeout(kwargs, ("include_authorized_operations", *_TIMEOUT))
        check.option_bool(kwargs, "include_authorized_operations")
        return self._start(_unique(group_ids, self._admin, work.describe_group, "groups"), seconds)

    def delete_consumer_groups(
        self, group_ids: list[str], **kwargs: Any
    ) -> dict[str, Future[None]]:
        """Delete groups: a future per group id."""
        check.check_group_ids(group_ids, "deleted", True)
        self._open()
        seconds = self._timeout(kwargs, _TIMEOUT)
        return self._start(_unique(group_ids, self._admin, _delete_group, "groups"), seconds)

    def list_consumer_group_offsets(
        self, list_consumer_group_offsets_request: list[Any], **kwargs: Any
    ) -> dict[str, Future[Any]]:
        """A group's committed offsets: a future per group id (a
        ``ConsumerGroupTopicPartitions``; ``OFFSET_INVALID`` where none is)."""
        req = check.check_list_offsets_request(list_consumer_group_offsets_request)
        self._open()
        seconds = self._timeout(kwargs, ("require_stable", *_TIMEOUT))
        check.option_bool(kwargs, "require_stable")
        job = _bind(work.list_group_offsets, self._admin, req)
        return self._start({req.group_id: job}, seconds)

    def alter_consumer_group_offsets(
        self, alter_consumer_group_offsets_request: list[Any], **kwargs: Any
    ) -> dict[str, Future[Any]]:
        """Commit offsets for a group: a future per group id."""
        req = check.check_alter_offsets(alter_consumer_group_offsets_request)
        self._open()
        seconds = self._timeout(kwargs, _TIMEOUT)
        job = _bind(work.alter_group_offsets, self._admin, req)
        return self._start({req.group_id: job}, seconds)

    def list_groups(self, group: str | None = None, timeout: float = -1) -> list[GroupMetadata]:
        """The groups (deprecated, as in confluent-kafka), as ``GroupMetadata``."""
        warnings.warn(
            "list_groups() is deprecated, use list_consumer_groups() "
            "and describe_consumer_groups() instead.",
            category=DeprecationWarning,
            stacklevel=2,
        )
        self._open(_HANDLE_CLOSED)
        ms = self._call_ms(timeout)
        if self._admin is None:
            time.sleep(ms / 1000)
            raise KafkaException(KafkaError(internal("_TIMED_OUT"), "Failed to list groups"))
        try:
            return _group_metadata(self._admin, group, ms)
        except Exception as exc:
            raise KafkaException(error_of(exc)) from None

    # -- SCRAM, offsets, records, elections --------------------------------------------------

    def describe_user_scram_credentials(self, users: list[str] | None = None, **kwargs: Any) -> Any:
        """Users' SCRAM credentials: with ``users``, a future per user; without,
        one future of a dict by user."""
        check.check_describe_scram(users)
        self._open()
        seconds = self._timeout(kwargs, _TIMEOUT)
        if users is None:
            return self._one(_bind(work.describe_scram, self._admin, None), seconds)
        return self._start(_unique(users, self._admin, _describe_user, "users"), seconds)

    def alter_user_scram_credentials(
        self, alterations: list[Any], **kwargs: Any
    ) -> dict[str, Future[None]]:
        """Upsert or delete users' SCRAM credentials: a future per user."""
        check.check_alter_scram(alterations)
        self._open()
        seconds = self._timeout(kwargs, _TIMEOUT)
        by_user: dict[str, list[Any]] = {}
        for a in alterations:
            by_user.setdefault(a.user, []).append(a)
        jobs: dict[Any, Job | KafkaException] = {
            u: _bind(work.alter_scram, self._admin, mine) for u, mine in by_user.items()
        }
        return self._start(jobs, seconds)

    def list_offsets(
        self, topic_partition_offsets: dict[TopicPartition, Any], **kwargs: Any
    ) -> dict[TopicPartition, Future[Any]]:
        """Offsets of partitions by ``OffsetSpec``: a future per partition (a
        ``ListOffsetsResultInfo``)."""
        check.check_list_offsets(topic_partition_offsets, kwargs)
        self._open()
        seconds = self._timeout(kwargs, ("isolation_level", *_TIMEOUT))
        jobs: dict[Any, Job | KafkaException] = {}
        for tp, spec in topic_partition_offsets.items():
            key = TopicPartition(tp.topic, int(tp.partition), spec_number(spec))
            jobs[key] = _bind(work.list_offset, self._admin, key, spec)
        return self._start(jobs, seconds)

    def delete_records(
        self, topic_partition_offsets: list[TopicPartition], **kwargs: Any
    ) -> dict[TopicPartition, Future[Any]]:
        """Delete records before each partition's offset: a future per partition
        (a ``DeletedRecords``)."""
        check.check_delete_records(topic_partition_offsets)
        self._open()
        seconds = self._timeout(kwargs, _OPERATION)
        return self._start(
            _unique(topic_partition_offsets, self._admin, work.delete_record, "partitions"), seconds
        )

    def elect_leaders(
        self, election_type: Any, partitions: list[TopicPartition] | None = None, **kwargs: Any
    ) -> Future[Any]:
        """Elect leaders: a future of a dict by partition (None or a ``KafkaError``)."""
        check.check_elect_leaders(election_type, partitions)
        self._open()
        seconds = self._timeout(kwargs, _OPERATION)
        if partitions is not None and len(set(partitions)) != len(partitions):
            return self._start(
                {None: work.fail("_INVALID_ARG", "Duplicate partitions specified")}, seconds
            )[None]
        return self._one(_bind(work.elect_leaders, self._admin, election_type, partitions), seconds)

    # -- the client --------------------------------------------------------------------------

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """confluent-kafka's call, its arguments checked as there; trafka's
        client keeps logging in with the credentials it was made with (a
        difference the migration page lists)."""
        for i, value in enumerate((username, password), 1):
            if not isinstance(value, str):
                raise TypeError(f"argument {i} must be str, not {type(value).__name__}")
        self._open(_HANDLE_CLOSED)

    def poll(self, timeout: float | None = None) -> int:
        """Serve the configuration's callbacks due (``error_cb``...), waiting up to
        ``timeout`` s (None or negative: until one) for a first; how many were served."""
        self._open()
        return self._served.serve(None if timeout is None or timeout < 0 else timeout)

    def __len__(self) -> int:
        """The callbacks waiting for :meth:`poll` (0 once closed)."""
        return 0 if self._closed else self._served.pending()

    def close(self) -> None:
        """Not in confluent-kafka (which closes at ``with``'s end): close trafka's admin client."""
        if self._closed:
            return
        self._closed = True
        self._served.stop_background()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._admin is not None:
            self._admin.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _timed_out(future: Future[Any]) -> None:
    if not future.done():
        future.set_exception(
            KafkaException(
                KafkaError(
                    internal("_TIMED_OUT"), "Failed while waiting for controller: Local: Timed out"
                )
            )
        )


def _settle(future: Future[Any], job: Job, ms: int) -> None:
    try:
        result = job(ms)
    except Exception as exc:
        future.set_exception(KafkaException(error_of(exc)))
    else:
        future.set_result(result)


def _bind(fn: Callable[..., Any], *args: Any) -> Job:
    """``fn(*args, ms)`` as a job."""
    return lambda ms: fn(*args, ms)


def _unique(
    keys: list[Any], admin: Any, fn: Callable[..., Any], what: str
) -> dict[Any, Job | KafkaException]:
    """A job per key; a key given twice fails, as librdkafka refuses duplicates."""
    jobs: dict[Any, Job | KafkaException] = {}
    for key in keys:
        if key in jobs:
            jobs[key] = work.fail("_INVALID_ARG", f"Duplicate {what} not allowed")
        else:
            jobs[key] = _bind(fn, admin, key)
    return jobs


def _delete_topic(admin: Any, name: str, ms: int) -> None:
    admin.delete_topics([name], timeout_ms=ms)


def _delete_group(admin: Any, group_id: str, ms: int) -> None:
    admin.delete_groups([group_id], timeout_ms=ms)


def _describe_user(admin: Any, user: str, ms: int) -> Any:
    return work.describe_scram(admin, [user], ms)[user]


def _cluster_metadata(admin: Any, topic: str | None, ms: int) -> ClusterMetadata:
    described = admin.describe_cluster(timeout_ms=ms)
    md = ClusterMetadata()
    md.cluster_id = described.cluster_id
    md.controller_id = described.controller_id
    for b in described.brokers:
        md.brokers[b.node_id] = BrokerMetadata(b.node_id, b.host, b.port)
    names = (
        [topic]
        if topic is not None
        else sorted(admin.list_topics(include_internal=True, timeout_ms=ms))
    )
    for name in names:
        tm = TopicMetadata(name)
        md.topics[name] = tm
        try:
            info = admin.describe_topics([name], timeout_ms=ms)[name]
        except Exception as exc:
            if topic is None:
                raise
            tm.error = error_of(exc)
            continue
        for p in info.partitions:
            pm = PartitionMetadata(p.partition, p.leader)
            pm.replicas = list(p.replicas)
            pm.isrs = list(p.isr)
            tm.partitions[p.partition] = pm
    return md


def _group_metadata(admin: Any, group: str | None, ms: int) -> list[GroupMetadata]:
    ids = [group] if group is not None else [g.group_id for g in admin.list_groups(timeout_ms=ms)]
    out = []
    for gid, d in admin.describe_groups(ids, timeout_ms=ms).items():
        g = GroupMetadata()
        g.id = gid
        g.state = d.state
        g.protocol_type = d.protocol_type
        g.protocol = d.protocol
        for m in d.members:
            member = GroupMember()
            member.id = m.member_id
            member.client_id = m.client_id
            member.client_host = m.client_host
            g.members.append(member)
        out.append(g)
    return out


#: The settings of a producer's or consumer's that reach a broker (bootstrap,
#: security, identity): what its ``list_topics()`` asks with.
_CONNECTION_KEYS = re.compile(
    r"^(bootstrap\.servers|metadata\.broker\.list|client\.id|security\.protocol|"
    r"(sasl|ssl|socket|broker\.address)\..*|(oauth|oauthbearer)_token_refresh_cb|oauth_cb)$"
)


def ask_cluster(conf: dict[str, Any] | None, call: str, *args: Any) -> Any:
    """A producer's or consumer's ``cluster_id()`` / ``list_topics()``: the
    admin client's ``call``, asked with the client's connection settings
    (``conf`` None: the client is closed)."""
    if conf is None:
        raise RuntimeError("Handle has been closed")
    settings = {k: v for k, v in conf.items() if _CONNECTION_KEYS.match(k)}
    with AdminClient(settings) as admin:
        return getattr(admin, call)(*args)
