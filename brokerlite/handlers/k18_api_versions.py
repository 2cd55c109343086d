"""ApiVersions (key 18), versions 0-4: the APIs and version ranges brokerlite serves.

The list comes from the handler registry, so a version is advertised exactly
when a handler serves it. A request for a version this broker does not know is
answered by :func:`~trafka.brokerlite.intake.admit` with a v0
body carrying UNSUPPORTED_VERSION and the ApiVersions range (KIP-511), which
is how clients discover the version to retry with. Client software name and
version (v3+) are accepted as sent.

From v3 the answer also lists the feature levels (KIP-584) brokerlite
implements, each supported from 0 to its highest level, and those finalized
now with their epoch. They are cluster state kept by
:mod:`trafka.brokerlite.features` and changed with UpdateFeatures (key 57): a
fresh broker has both at 1, epoch 1; each applied change raises the epoch by
one; a feature at level 0 is left out of the finalized list. They survive a
restart.

* ``group.version`` 1: the consumer group protocol of KIP-848
  (ConsumerGroupHeartbeat, ConsumerGroupDescribe); at 0 those APIs answer
  UNSUPPORTED_VERSION;
* ``share.version`` 1: share groups (KIP-932); at 0 the share-group APIs
  (keys 76-79, 90-92) answer UNSUPPORTED_VERSION.

Those APIs stay in the list whatever the levels, as Kafka's broker keeps them.
``transaction.version`` is left out, which clients read as 0: transactions
follow the protocol before KIP-890's second part, as brokerlite serves them.
``metadata.version`` and ``kraft.version`` describe a KRaft controller quorum,
which brokerlite does not have.
"""

from __future__ import annotations

from trafka.brokerlite.features import SUPPORTED
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k18_api_versions as m

from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.API_VERSIONS
MIN_VERSION = 0
MAX_VERSION = 4


def handle(ctx: RequestContext, request: m.ApiVersionsRequest) -> m.ApiVersionsResponse:
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
            for name, (low, high) in SUPPORTED.items()
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
