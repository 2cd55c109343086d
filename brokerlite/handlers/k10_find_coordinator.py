"""FindCoordinator (key 10), versions 0-6: where a group's or transaction's coordinator lives.

* Group keys (key_type 0) and transaction keys (key_type 1, transactional
  ids): this node, always (it coordinates every group and every transaction).
  v4+ batches keys in ``coordinator_keys`` and answers one entry per key.
  The first authorized request of each type lists the type's internal topic,
  ``__consumer_offsets`` or ``__transaction_state``, as Kafka creates it then
  (:mod:`trafka.brokerlite.storage.internal_topics`: its data stays in this
  node's journals).
* Share-group keys (key_type 2) and unknown types: INVALID_REQUEST.
* Cluster mode: a group's coordinator is the leader of its ``__consumer_offsets``
  partition, a transactional id's the leader of its ``__transaction_state``
  partition (Kafka's hash of the key). The topic is created on the first
  request with ``offsets.topic.num.partitions`` (``transaction.state.log.num.partitions``)
  partitions and Kafka's configs; that request is answered once the topic has
  leaders (or after 5 s, with COORDINATOR_NOT_AVAILABLE), so that clients do
  not retry through the creation. COORDINATOR_NOT_AVAILABLE too while the key's partition has
  no leader.

Authorization, per key: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED)
or on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging

from trafka.brokerlite.cluster.view import ZkTask
from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.storage.internal_topics import (
    KAFKA_CONFIGS,
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    list_internal_topic,
    num_partitions,
)
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k10_find_coordinator as m

from ..outcomes import Parked
from ._authz import AclOperation, group_allowed, transactional_id_allowed
from ._base import HandlerSpec, RequestContext
from ._util import park_on_tasks

log = logging.getLogger("trafka.brokerlite")

API_KEY = ApiKey.FIND_COORDINATOR
MIN_VERSION = 0
MAX_VERSION = 6

GROUP = 0
TRANSACTION = 1
# How long a request waits for an internal topic created on its behalf.
CREATE_WAIT_MS = 5_000


def _answer(ctx: RequestContext, key: str, key_type: int) -> tuple[ErrorCode, str | None]:
    if key_type == GROUP:
        if not group_allowed(ctx, AclOperation.DESCRIBE, key):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, "not authorized to describe the group"
        return ErrorCode.NONE, None
    if key_type == TRANSACTION:
        if not transactional_id_allowed(ctx, AclOperation.DESCRIBE, key):
            return (
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "not authorized to describe the transactional id",
            )
        return ErrorCode.NONE, None
    return ErrorCode.INVALID_REQUEST, f"unsupported coordinator key type {key_type}"


def _where(ctx: RequestContext, key: str, key_type: int) -> tuple[ErrorCode, str | None, int]:
    """The coordinator's node for ``key`` (an error and message when there is none)."""
    code, message = _answer(ctx, key, key_type)
    cluster = ctx.cluster
    if code != ErrorCode.NONE or cluster is None:
        return code, message, ctx.node_id
    transactional = key_type == TRANSACTION
    topic = TRANSACTION_STATE_TOPIC if transactional else OFFSETS_TOPIC
    if topic not in cluster.image.topics:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{topic} is being created", -1
    node = cluster.coordinator(key, transactional=transactional)
    broker_info = cluster.broker(node)
    if node < 0 or broker_info is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the key's {topic} partition has no leader", -1
    return ErrorCode.NONE, None, node


def _address(ctx: RequestContext, node: int) -> tuple[str, int]:
    cluster = ctx.cluster
    if cluster is not None:
        info = cluster.broker(node)
        if info is not None:
            return info.host, info.port
    return ctx.advertised


def _create_missing(ctx: RequestContext, key_type: int) -> ZkTask | None:
    """The key type's internal topic made on its first use (as Kafka does): on
    one node listed at once; in a cluster the task creating it, or None when it
    exists or there is none to create."""
    if key_type not in (GROUP, TRANSACTION):
        return None
    topic = TRANSACTION_STATE_TOPIC if key_type == TRANSACTION else OFFSETS_TOPIC
    cluster = ctx.cluster
    if cluster is None:
        if ctx.logs.topic(topic) is None:
            try:
                list_internal_topic(
                    ctx.logs, topic, num_partitions(ctx.config, topic), KAFKA_CONFIGS[topic]
                )
            except BrokerError as exc:  # (the coordinator is here all the same)
                log.warning("cannot list internal topic %r: %s", topic, exc)
        return None
    if topic in cluster.image.topics:
        return None
    return ZkTask(
        "create_topic",
        {
            "name": topic,
            "num_partitions": num_partitions(ctx.config, topic),
            "replication_factor": -1,
            "configs": dict(KAFKA_CONFIGS[topic]),
            "quiet": True,
            "if_missing": True,
            "timeout_ms": CREATE_WAIT_MS,
        },
    )


def handle(
    ctx: RequestContext, request: m.FindCoordinatorRequest
) -> m.FindCoordinatorResponse | Parked:
    keys = request.coordinator_keys if ctx.version >= 4 else [request.key]
    authorized = any(_answer(ctx, k, request.key_type)[0] == ErrorCode.NONE for k in keys)
    task = _create_missing(ctx, request.key_type) if authorized else None
    if task is not None:
        # The answer waits for the topic's leaders: a client asking during the
        # creation gets its coordinator, not errors to retry through.
        return park_on_tasks(ctx, [task], CREATE_WAIT_MS, lambda: _answer_all(ctx, request))
    return _answer_all(ctx, request)


def _answer_all(
    ctx: RequestContext, request: m.FindCoordinatorRequest
) -> m.FindCoordinatorResponse:
    if ctx.version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            code, message, node = _where(ctx, key, request.key_type)
            ok = code == ErrorCode.NONE
            host, port = _address(ctx, node) if ok else ("", -1)
            coordinators.append(
                m.FindCoordinatorResponse.Coordinator(
                    key=key,
                    node_id=node if ok else -1,
                    host=host if ok else "",
                    port=port if ok else -1,
                    error_code=code,
                    error_message=message,
                )
            )
        return m.FindCoordinatorResponse(coordinators=coordinators)
    code, message, node = _where(ctx, request.key, request.key_type)
    ok = code == ErrorCode.NONE
    host, port = _address(ctx, node) if ok else ("", -1)
    return m.FindCoordinatorResponse(
        error_code=code,
        error_message=message if ctx.version >= 1 else "",
        node_id=node if ok else -1,
        host=host if ok else "",
        port=port if ok else -1,
    )


def error_response(
    request: m.FindCoordinatorRequest | None, version: int, code: ErrorCode
) -> m.FindCoordinatorResponse:
    if version >= 4:
        keys = request.coordinator_keys if request is not None else []
        return m.FindCoordinatorResponse(
            coordinators=[
                m.FindCoordinatorResponse.Coordinator(
                    key=k, node_id=-1, port=-1, error_code=code, error_message=None
                )
                for k in keys
            ]
        )
    return m.FindCoordinatorResponse(error_code=code, error_message=None, node_id=-1, port=-1)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="config logs cluster authorizer purgatory",
)
