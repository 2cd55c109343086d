"""ElectLeaders (key 43), versions 0-2, as Kafka's controller answers.

In cluster mode the election is the controller's: the partitions that need one
are written to ``/admin/preferred_replica_election`` (Kafka's znode) and the
answer comes once the controller has carried it out. Per partition, as Kafka:
ELECTION_NOT_NEEDED when the preferred replica leads already (or, for an
unclean election, when the partition has a leader); PREFERRED_LEADER_NOT_AVAILABLE
when the preferred replica is not live or not in the ISR;
ELIGIBLE_LEADERS_NOT_AVAILABLE when an unclean election finds no live replica;
REQUEST_TIMED_OUT when the leader wanted could be elected but is not seen
leading by the request's ``timeout_ms`` (Kafka's DelayedElectLeader).

On a single node:

Every partition is led by this node, its only (so its preferred) replica: no
election is ever needed. Named partitions are answered ELECTION_NOT_NEEDED, or
UNKNOWN_TOPIC_OR_PARTITION when they do not exist; with a null list (every
partition) each topic is listed with no partitions, since Kafka leaves out the
partitions that needed no election. An election type other than preferred (0)
or unclean (1) is INVALID_REQUEST.

Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED at the
top (v1+) and for every named partition. Version 0 has no top-level error: an
error answer there names it on every named partition only.
"""

from __future__ import annotations

from trafka.brokerlite.cluster.view import ZkTask
from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k43_elect_leaders as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._util import park_on_tasks

API_KEY = ApiKey.ELECT_LEADERS
MIN_VERSION = 0
MAX_VERSION = 2

TopicResult = m.ElectLeadersResponse.ReplicaElectionResult
PartitionResult = m.ElectLeadersResponse.PartitionResult


def _refused(
    request: m.ElectLeadersRequest | None, version: int, code: ErrorCode
) -> m.ElectLeadersResponse:
    # The error at the top (v1+) and for every named partition: v0 has only the
    # latter (so a v0 request for every partition learns nothing, as from Kafka).
    return m.ElectLeadersResponse(
        error_code=code if version >= 1 else ErrorCode.NONE,
        replica_election_results=[
            TopicResult(
                topic=t.topic,
                partition_result=[
                    PartitionResult(partition_id=p, error_code=code, error_message=code.message)
                    for p in t.partitions
                ],
            )
            for t in (request.topic_partitions if request is not None else None) or []
        ],
    )


def handle(ctx: RequestContext, request: m.ElectLeadersRequest) -> m.ElectLeadersResponse | Parked:
    if not ctx.allowed(AclOperation.ALTER, AclResourceType.CLUSTER, CLUSTER_NAME):
        return _refused(request, ctx.version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    election = request.election_type if ctx.version >= 1 else 0
    if election not in (0, 1):
        return error_response(request, ctx.version, ErrorCode.INVALID_REQUEST)
    if ctx.cluster is not None:
        return _cluster_election(ctx, request, election)
    logs = ctx.logs
    results = []
    if request.topic_partitions is None:
        results = [TopicResult(topic=t.name, partition_result=[]) for t in logs.topics()]
    else:
        for topic in request.topic_partitions:
            info = logs.topic(topic.topic)
            parts = []
            for p in topic.partitions:
                if info is None or not 0 <= p < info.num_partitions:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    message: str | None = f"no such partition as {topic.topic}-{p}"
                else:
                    code, message = ErrorCode.ELECTION_NOT_NEEDED, None
                parts.append(
                    PartitionResult(partition_id=p, error_code=code, error_message=message)
                )
            results.append(TopicResult(topic=topic.topic, partition_result=parts))
    return m.ElectLeadersResponse(error_code=ErrorCode.NONE, replica_election_results=results)


def _cluster_election(
    ctx: RequestContext, request: m.ElectLeadersRequest, election: int
) -> m.ElectLeadersResponse | Parked:
    """Cluster mode: the controller carries the election out (Kafka's rules per
    partition: ELECTION_NOT_NEEDED when the preferred replica leads already, or for
    an unclean election when the partition has a leader; PREFERRED_LEADER_NOT_AVAILABLE
    or ELIGIBLE_LEADERS_NOT_AVAILABLE when nobody can be elected; REQUEST_TIMED_OUT
    when somebody could be but the new leader is not seen by ``timeout_ms``)."""
    cluster = ctx.cluster
    assert cluster is not None
    image = cluster.image
    every = request.topic_partitions is None
    wanted: list[tuple[str, int]] = []
    if every:
        wanted = [(t, p) for t, a in sorted(image.topics.items()) for p in sorted(a.replicas)]
    else:
        wanted = [(t.topic, p) for t in request.topic_partitions or [] for p in t.partitions]
    unclean = election == 1
    known = [(t, p) for t, p in wanted if cluster.replicas_of(t, p)]

    def needed(t: str, p: int) -> bool:
        state = cluster.state(t, p)
        if state is None:
            return False
        if unclean:
            return cluster.leader(t, p) < 0
        return state.leader != cluster.replicas_of(t, p)[0]

    to_elect = [tp for tp in known if needed(*tp)]
    not_seen = "the election was not seen carried out before the request's timeout"

    def electable(t: str, p: int) -> bool:
        """Whether the controller can elect the leader wanted: then a partition still
        without it was not elected in time. Kafka's DelayedElectLeader answers those
        REQUEST_TIMED_OUT and keeps the two codes above for elections the controller
        refused (the preferred replica, or every replica, not live and in sync)."""
        state = cluster.state(t, p)
        live = cluster.image.brokers
        if state is None:
            return False
        if unclean:
            return any(r in live for r in cluster.replicas_of(t, p))
        preferred = cluster.replicas_of(t, p)[0]
        return preferred in live and preferred in state.isr

    def answer() -> m.ElectLeadersResponse:
        by_topic: dict[str, list[PartitionResult]] = {}
        for t, p in wanted:
            if not cluster.replicas_of(t, p):
                code: int = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                message: str | None = f"no such partition as {t}-{p}"
            elif (t, p) not in to_elect:
                if every:
                    continue  # Kafka lists only the partitions it elected
                code, message = ErrorCode.ELECTION_NOT_NEEDED, None
            elif unclean:
                ok = cluster.leader(t, p) >= 0
                code = ErrorCode.NONE if ok else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
                message = None if ok else "no live replica of the partition"
                if not ok and electable(t, p):
                    code, message = ErrorCode.REQUEST_TIMED_OUT, not_seen
            else:
                preferred = cluster.replicas_of(t, p)[0]
                ok = cluster.leader(t, p) == preferred
                code = ErrorCode.NONE if ok else ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                message = None if ok else f"preferred replica {preferred} is not live or in sync"
                if not ok and electable(t, p):
                    code, message = ErrorCode.REQUEST_TIMED_OUT, not_seen
            by_topic.setdefault(t, []).append(
                PartitionResult(partition_id=p, error_code=code, error_message=message)
            )
        return m.ElectLeadersResponse(
            error_code=ErrorCode.NONE,
            replica_election_results=[
                TopicResult(topic=t, partition_result=parts) for t, parts in by_topic.items()
            ],
        )

    if not to_elect:
        return answer()
    task = ZkTask(
        "elect_leaders",
        {"partitions": to_elect, "unclean": unclean, "timeout_ms": request.timeout_ms},
    )
    return park_on_tasks(ctx, [task], request.timeout_ms, answer)


def error_response(
    request: m.ElectLeadersRequest | None, version: int, code: ErrorCode
) -> m.ElectLeadersResponse:
    if version >= 1:
        return m.ElectLeadersResponse(error_code=code, replica_election_results=[])
    return _refused(request, version, code)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="logs cluster authorizer purgatory",
)
