"""Metadata (key 3), versions 0-13: this node, the topics and their partitions.

* One broker (this node) leads every partition with leader epoch 0; replicas and
  ISR are ``[node_id]``; it is also the controller. In cluster mode the answer
  describes the whole cluster as ZooKeeper last had it: the live brokers, the
  controller, each partition's leader, leader epoch, replicas, ISR and offline
  replicas (a partition without a leader: LEADER_NOT_AVAILABLE), and the
  Auto-creation there is the controller's: the topic
  is answered LEADER_NOT_AVAILABLE until its partitions have leaders. The cluster id (v2+) is
  the one stored in the data directory.
* Kafka's internal topics (``__consumer_offsets``, ``__transaction_state``,
  ``__share_group_state``) are listed once Kafka would have created them
  (:mod:`trafka.brokerlite.storage.internal_topics`), on one node too, led by
  this node. ``is_internal`` is the name's, as Kafka answers it, also for a
  topic answered with an error.
* Topics: ``null`` (v1+) or ``[]`` in v0 lists every topic; otherwise the named
  topics, or in v10+ topics named by id (unknown id: UNKNOWN_TOPIC_ID). Topic
  ids are returned from v10.
* An unknown topic is created with the broker's ``num_partitions`` when
  ``auto_create_topics`` is on and the request allows it
  (``allow_auto_topic_creation``, v4+; always allowed before v4), and that
  answer names it as Kafka's names a topic it is creating: no partitions,
  LEADER_NOT_AVAILABLE (``protocol_version`` 3.9, as Kafka 3.9) or
  UNKNOWN_TOPIC_OR_PARTITION (4.0, as Kafka 4's controller-made topics); the
  next request finds it. Not allowed: UNKNOWN_TOPIC_OR_PARTITION. A name
  breaking Kafka's topic rules gets INVALID_TOPIC_EXCEPTION. An internal topic
  is created as Kafka creates it (its partition count and configs).
* Authorized operations (v8+) are reported only when asked for: what the
  principal may do on each topic returned, and on the cluster (v8-10; 0
  without DESCRIBE on it); everything, without an authorizer.
* Authorization: a topic needs DESCRIBE. Listing every topic leaves the others
  out silently; a topic asked for by name without it gets
  TOPIC_AUTHORIZATION_FAILED (its existence unexamined, no topic id), by id
  the same with the id and no name. Auto-creation also needs CREATE on the
  cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED.
* The top-level error code (v13, KIP-1102) is 0 in every answer, as Kafka's broker
  leaves it; only a request refused whole (an unsupported version, an internal
  error) carries the code there, as on every topic asked for.
  REBOOTSTRAP_REQUIRED, the code the KIP made it for, is never sent: brokerlite
  knows of no other cluster its clients should find.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from trafka.brokerlite.errors import BrokerError, TopicExistsError
from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.brokerlite.storage.internal_topics import (
    KAFKA_CONFIGS,
    is_internal,
    list_internal_topic,
    num_partitions,
)
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k03_metadata as m

from ._base import HandlerSpec, RequestContext
from ._util import (
    LEADER_EPOCH,
    NO_AUTHORIZED_OPERATIONS,
    NULL_UUID,
    TOPIC_AUTHORIZED_OPERATIONS,
    cluster_partition,
    code_of,
    denied,
)

if TYPE_CHECKING:
    from trafka.brokerlite.cluster.view import ClusterView
    from trafka.brokerlite.storage.topics import TopicInfo

API_KEY = ApiKey.METADATA
MIN_VERSION = 0
MAX_VERSION = 13

log = logging.getLogger("trafka.brokerlite")

Topic = m.MetadataResponse.MetadataResponseTopic
Partition = m.MetadataResponse.MetadataResponsePartition


def handle(ctx: RequestContext, request: m.MetadataRequest) -> m.MetadataResponse:
    version = ctx.version
    if (
        10 <= version < 12
        and request.topics is not None
        and any(t.name is None or t.topic_id != NULL_UUID for t in request.topics)
    ):
        return error_response(request, version, ErrorCode.INVALID_REQUEST)
    answer = _Topics(ctx, request)
    topics: list[Topic] = []
    if request.topics is None or (version == 0 and not request.topics):
        every = ctx.logs.topics()
        hidden = denied(ctx, AclOperation.DESCRIBE, AclResourceType.TOPIC, (i.name for i in every))
        topics = [answer.described(info) for info in every if info.name not in hidden]
    else:
        seen: set[object] = set()
        for wanted in request.topics:
            if version >= 10 and wanted.topic_id != NULL_UUID:
                if wanted.topic_id not in seen:
                    seen.add(wanted.topic_id)
                    topics.append(answer.by_id(wanted.topic_id))
            elif (wanted.name or "") not in seen:
                seen.add(wanted.name or "")
                topics.append(answer.by_name(wanted.name or ""))
    brokers, controller = _brokers(ctx)
    return m.MetadataResponse(
        brokers=brokers,
        cluster_id=ctx.cluster_id if version >= 2 else None,
        controller_id=controller if version >= 1 else -1,
        topics=topics,
        cluster_authorized_operations=_cluster_operations(ctx, request),
    )


class _Topics:
    """The topics of one Metadata answer: described, refused or created, by the
    rules of the module docstring."""

    def __init__(self, ctx: RequestContext, request: m.MetadataRequest) -> None:
        self.ctx = ctx
        self.cluster = ctx.cluster
        self.want_ops = ctx.version >= 8 and request.include_topic_authorized_operations
        # An unknown topic id: Kafka leaves its bit field unset; an unsecured
        # brokerlite has always reported everything there, and still does.
        secured = ctx.authorizer is not None
        self.unknown_id_ops = (
            TOPIC_AUTHORIZED_OPERATIONS
            if self.want_ops and not secured
            else NO_AUTHORIZED_OPERATIONS
        )
        self.allow_create = ctx.config.auto_create_topics and (
            ctx.version < 4 or bool(request.allow_auto_topic_creation)
        )

    def ops_of(self, name: str) -> int:
        if not self.want_ops:
            return NO_AUTHORIZED_OPERATIONS
        return self.ctx.authorized_operations(AclResourceType.TOPIC, name)

    def failed(self, code: ErrorCode, name: str) -> Topic:
        return Topic(
            error_code=code,
            name=name,
            is_internal=is_internal(name),
            topic_authorized_operations=self.ops_of(name),
        )

    def described(self, info: TopicInfo) -> Topic:
        if self.cluster is not None:
            return _cluster_topic(self.cluster, info, self.ops_of(info.name))
        node = self.ctx.node_id
        return Topic(
            error_code=ErrorCode.NONE,
            name=info.name,
            topic_id=info.topic_id,
            is_internal=is_internal(info.name),
            partitions=[
                Partition(
                    error_code=ErrorCode.NONE,
                    partition_index=i,
                    leader_id=node,
                    leader_epoch=LEADER_EPOCH,
                    replica_nodes=[node],
                    isr_nodes=[node],
                    offline_replicas=[],
                )
                for i in range(info.num_partitions)
            ],
            topic_authorized_operations=self.ops_of(info.name),
        )

    def by_id(self, topic_id: uuid.UUID) -> Topic:
        info = self.ctx.logs.topic_by_id(topic_id)
        if info is None:
            return Topic(
                error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                name=None,
                topic_id=topic_id,
                topic_authorized_operations=self.unknown_id_ops,
            )
        if denied(self.ctx, AclOperation.DESCRIBE, AclResourceType.TOPIC, [info.name]):
            return _refused(None, topic_id)
        return self.described(info)

    def by_name(self, name: str) -> Topic:
        ctx = self.ctx
        if denied(ctx, AclOperation.DESCRIBE, AclResourceType.TOPIC, [name]):
            return _refused(name)
        info = ctx.logs.topic(name)
        if info is not None:
            return self.described(info)
        if not self.allow_create:
            return self.failed(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)
        if not (
            ctx.allowed(AclOperation.CREATE, AclResourceType.CLUSTER, CLUSTER_NAME)
            or ctx.allowed(AclOperation.CREATE, AclResourceType.TOPIC, name)
        ):
            return _refused(name)
        return self.created(name)

    def created(self, name: str) -> Topic:
        """An unknown topic, auto-created (the controller's work in a cluster)."""
        ctx = self.ctx
        internal = is_internal(name)
        partitions = num_partitions(ctx.config, name) if internal else -1
        configs = dict(KAFKA_CONFIGS[name]) if internal else {}
        if self.cluster is not None:
            # The controller must place it: Kafka answers LEADER_NOT_AVAILABLE
            # until its partitions have leaders, and the client asks again.
            self.cluster.submit(
                "create_topic",
                name=name,
                num_partitions=partitions,
                replication_factor=-1,
                assignments=None,
                configs=configs,
                quiet=True,
            )
            return self.failed(ErrorCode.LEADER_NOT_AVAILABLE, name)
        info: TopicInfo | None
        try:
            if internal:
                info = list_internal_topic(ctx.logs, name, partitions, configs)
            else:
                info = ctx.logs.create_topic(name, ctx.config.num_partitions)
                log.info(
                    "auto-created topic %r with %d partition(s)", name, ctx.config.num_partitions
                )
        except TopicExistsError:
            info = ctx.logs.topic(name)
        except BrokerError as exc:
            return self.failed(code_of(exc), name)
        if info is None:
            return self.failed(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)
        # Created, but answered as Kafka answers a topic its request made: not yet
        # (the client asks again). Kafka 3.9 says LEADER_NOT_AVAILABLE; Kafka 4's
        # auto-creation, handed to its controller, UNKNOWN_TOPIC_OR_PARTITION.
        if ctx.config.protocol_version == "3.9":
            return self.failed(ErrorCode.LEADER_NOT_AVAILABLE, name)
        return self.failed(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)


def _refused(name: str | None, topic_id: uuid.UUID = NULL_UUID) -> Topic:
    return Topic(
        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        name=name,
        topic_id=topic_id,
        is_internal=is_internal(name),
        topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )


def _cluster_operations(ctx: RequestContext, request: m.MetadataRequest) -> int:
    """What the principal may do on the cluster (v8-10, when asked for)."""
    if not (8 <= ctx.version <= 10 and request.include_cluster_authorized_operations):
        return NO_AUTHORIZED_OPERATIONS
    if not ctx.allowed(AclOperation.DESCRIBE, AclResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    return ctx.authorized_operations(AclResourceType.CLUSTER, CLUSTER_NAME)


def _brokers(
    ctx: RequestContext,
) -> tuple[list[m.MetadataResponse.MetadataResponseBroker], int]:
    """The live brokers and the controller: this node alone, or the cluster's."""
    cluster = ctx.cluster
    if cluster is None:
        host, port = ctx.advertised
        node = ctx.node_id
        return [m.MetadataResponse.MetadataResponseBroker(node_id=node, host=host, port=port)], node
    image = cluster.image
    brokers = [
        m.MetadataResponse.MetadataResponseBroker(
            node_id=b.node_id, host=b.host, port=b.port, rack=b.rack
        )
        for b in sorted(image.brokers.values(), key=lambda b: b.node_id)
    ]
    return brokers, image.controller_id


def _cluster_topic(cluster: ClusterView, info: TopicInfo, ops: int) -> Topic:
    """A topic as the cluster has it: each partition's leader, epoch, replicas, ISR
    and offline replicas; LEADER_NOT_AVAILABLE for a partition without a leader."""
    partitions = []
    for i in range(info.num_partitions):
        p = cluster_partition(cluster, info.name, i)
        partitions.append(
            Partition(
                error_code=p.error_code,
                partition_index=i,
                leader_id=p.leader_id,
                leader_epoch=p.leader_epoch,
                replica_nodes=p.replicas,
                isr_nodes=p.isr,
                offline_replicas=p.offline_replicas,
            )
        )
    return Topic(
        error_code=ErrorCode.NONE,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=is_internal(info.name),
        partitions=partitions,
        topic_authorized_operations=ops,
    )


def error_response(
    request: m.MetadataRequest | None, version: int, code: ErrorCode
) -> m.MetadataResponse:
    topics = []
    if request is not None and request.topics:
        topics = [
            Topic(error_code=code, name="" if t.name is None else t.name, topic_id=t.topic_id)
            for t in request.topics
        ]
    return m.MetadataResponse(topics=topics, error_code=code)


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="config logs cluster authorizer"
)
