"""ApiVersions (key 18), versions 0-5: the APIs and version ranges brokerlite serves.

The list comes from the handler registry, so a version is advertised exactly
when a handler serves it. A request for a version this broker does not know is
answered by :func:`~trafka.brokerlite.intake.admit` with a v0
body carrying UNSUPPORTED_VERSION and the ApiVersions range (KIP-511), which
is how clients discover the version to retry with. Client software name and
version (v3+) are accepted as sent.

From v3 the answer also lists the feature levels (KIP-584) brokerlite
implements, each supported from 0 to its highest level (from v4 only: before,
a feature supported from 0 is left out, KAFKA-17011), and those finalized
now with their epoch. They are cluster state kept by
:mod:`trafka.brokerlite.features` and changed with UpdateFeatures (key 57): a
fresh broker has each at its highest level, epoch 1; each applied change
raises the epoch by one; a feature at level 0 is left out of the finalized
list. They survive a restart.

* ``group.version`` 1: the consumer group protocol of KIP-848
  (ConsumerGroupHeartbeat, ConsumerGroupDescribe); at 0 those APIs answer
  UNSUPPORTED_VERSION;
* ``share.version`` 2 (a single node and a cluster; supported 0-2, as Kafka
  4.4): share groups (KIP-932) with dead-letter queues (KIP-1191,
  :mod:`trafka.brokerlite.shares.dead_letters`); at 1 share groups without them; at 0 the
  share-group APIs (keys 76-79, 90-92) answer UNSUPPORTED_VERSION.

* ``transaction.version`` 2 (a single node and a cluster; supported 0-2, as
  Kafka 4.x): clients use KIP-890 part 2's transactions (Produce v12+ and
  TxnOffsetCommit v5+ without AddPartitionsToTxn/AddOffsetsToTxn, EndTxn v5+
  bumping the epoch); at 1 or 0 they use the earlier flow. In a cluster the
  levels are the cluster's (ZooKeeper's ``/feature``, which every broker
  follows), the epoch the znode's version plus 2.

Those APIs stay in the list whatever the levels, as Kafka's broker keeps them
(Produce v12, TxnOffsetCommit v5 and EndTxn v5 as well: Kafka's clients step
down by the level, not by the versions).
From v5 (KIP-1242) the client names the cluster and the node it means to
reach, so that a connection that reached another broker (an address reused
after a restart) is found at once: with neither (``cluster_id`` null,
``node_id`` -1) nothing is checked; with both, another cluster's id or another
node's id is answered REBOOTSTRAP_REQUIRED (the client drops its metadata and
bootstraps again); with only one of them, INVALID_REQUEST. Either error
answer lists nothing (no APIs, no features, features epoch -1), and the
connection stays open, as Kafka 4.4 does. The ids are compared as sent (an
empty cluster id is one given).

``metadata.version`` and ``kraft.version`` describe a KRaft controller quorum,
which brokerlite does not have.
"""

from __future__ import annotations

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k18_api_versions as m

from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.API_VERSIONS
MIN_VERSION = 0
MAX_VERSION = 5
NO_NODE = -1


def _misrouted(ctx: RequestContext, request: m.ApiVersionsRequest) -> ErrorCode:
    """KIP-1242's check of a v5 request's ids (see the module's rules)."""
    named = (request.cluster_id is not None, request.node_id != NO_NODE)
    if not any(named):
        return ErrorCode.NONE
    if not all(named):
        return ErrorCode.INVALID_REQUEST
    if request.cluster_id != ctx.cluster_id or request.node_id != ctx.node_id:
        return ErrorCode.REBOOTSTRAP_REQUIRED
    return ErrorCode.NONE


def handle(ctx: RequestContext, request: m.ApiVersionsRequest) -> m.ApiVersionsResponse:
    if ctx.version >= 5:
        code = _misrouted(ctx, request)
        if code != ErrorCode.NONE:
            return m.ApiVersionsResponse(error_code=code, api_keys=[], finalized_features_epoch=-1)
    keys = [
        m.ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
        for key, low, high in ctx.broker.api_versions()
    ]
    if ctx.version < 3:
        return m.ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=keys)
    features = ctx.features
    return m.ApiVersionsResponse(
        error_code=ErrorCode.NONE,
        api_keys=keys,
        supported_features=[
            m.ApiVersionsResponse.SupportedFeatureKey(name=name, min_version=low, max_version=high)
            for name, (low, high) in features.supported.items()
            # Before v4 a feature supported from level 0 is left out (KAFKA-17011:
            # older clients refused a minimum of 0), as Kafka 4.x's brokers do.
            if low > 0 or ctx.version >= 4
        ],
        finalized_features_epoch=features.epoch,
        finalized_features=[
            m.ApiVersionsResponse.FinalizedFeatureKey(
                name=name, max_version_level=level, min_version_level=level
            )
            for name, level in features.finalized().items()
        ],
    )


def error_response(
    request: m.ApiVersionsRequest | None, version: int, code: ErrorCode
) -> m.ApiVersionsResponse:
    return m.ApiVersionsResponse(
        error_code=code,
        api_keys=[
            m.ApiVersionsResponse.ApiVersion(
                api_key=API_KEY, min_version=MIN_VERSION, max_version=MAX_VERSION
            )
        ],
    )


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="features broker"
)
