"""UpdateFeatures (key 57), versions 0-2: finalize feature levels (KIP-584).

brokerlite is its own controller: the levels are checked and kept by
:mod:`trafka.brokerlite.features` (its docstring states the rules: which
features and levels, upgrade against downgrade, level 0 to remove a feature,
all or nothing) and reported by ApiVersions v3+ with their epoch.

Versions:

* v0 has no upgrade type but ``AllowDowngrade``: set, the update is a safe
  downgrade, else an upgrade (as Kafka reads a v0 request).
* v1 adds ``UpgradeType`` per update and ``ValidateOnly``: the checks run and
  nothing changes (the epoch neither).
* v2 answers with the top-level error alone; v0-v1 also list each feature's
  result (NONE for each when the request succeeded, none when it failed, as
  Kafka's ``UpdateFeaturesResponse.createWithErrors``).

Errors, top-level, the first that applies:

* CLUSTER_AUTHORIZATION_FAILED unless the principal may ALTER the cluster;
* INVALID_REQUEST when a feature is named twice (KIP-584; nothing is applied);
* INVALID_UPDATE_VERSION, with the reason, for the first update the controller
  refuses (nothing is applied);
* UNKNOWN_SERVER_ERROR when the change cannot be journaled (nothing changed).

On one node ``timeoutMs`` is not waited on: the change is durable before the answer.

In a cluster the levels are the cluster's, kept in ZooKeeper's ``/feature`` as
Kafka 3.9's ZooKeeper-mode controller keeps them
(:mod:`trafka.brokerlite.cluster.driver.feature_sync`): any broker checks the
request against the levels it follows and has the change written there, and
answers once it is written and read back (UNKNOWN_SERVER_ERROR, with the
reason, when ZooKeeper could not take it; REQUEST_TIMED_OUT when it did not
answer within ``timeoutMs``); every broker then reports the new levels.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from trafka.brokerlite.features import (
    SAFE_DOWNGRADE,
    UPGRADE,
    FeatureStoreError,
    FeatureUpdateError,
    plan_update,
)
from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k57_update_features as m

from ._base import HandlerSpec, RequestContext
from ._util import park_on_tasks, task_outcome

if TYPE_CHECKING:
    from trafka.brokerlite.outcomes import Parked

API_KEY = ApiKey.UPDATE_FEATURES
MIN_VERSION = 0
MAX_VERSION = 2
_RESULTS_UNTIL = 1  # v2 dropped the per-feature results

log = logging.getLogger("trafka.brokerlite")

Response = m.UpdateFeaturesResponse


def _upgrade_type(update: m.UpdateFeaturesRequest.FeatureUpdateKey, version: int) -> int:
    if version == 0:
        return SAFE_DOWNGRADE if update.allow_downgrade else UPGRADE
    return update.upgrade_type


def handle(ctx: RequestContext, request: m.UpdateFeaturesRequest) -> Response | Parked:
    if not ctx.allowed(AclOperation.ALTER, AclResourceType.CLUSTER, CLUSTER_NAME):
        return _failed(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"{ctx.principal} may not update features (ALTER on the cluster)",
        )
    names = [u.feature for u in request.feature_updates]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        return _failed(
            ErrorCode.INVALID_REQUEST,
            f"the request names feature {', '.join(repeated)} more than once",
        )
    store = ctx.features
    try:
        planned = plan_update(
            store.levels(),
            (
                (u.feature, u.max_version_level, _upgrade_type(u, ctx.version))
                for u in request.feature_updates
            ),
            store.supported,
        )
    except FeatureUpdateError as exc:
        return _failed(exc.code, str(exc))
    if planned and not request.validate_only and ctx.cluster is not None:
        return _in_the_cluster(ctx, request, planned, names)
    if planned and not request.validate_only:
        try:
            epoch = store.update(planned)
        except FeatureStoreError as exc:
            log.error("cannot store feature levels: %s", exc)
            return _failed(ErrorCode.UNKNOWN_SERVER_ERROR, "the feature journal cannot be written")
        log.info(
            "feature levels updated by %r: %s (finalized epoch %d)",
            ctx.principal,
            ", ".join(f"{n}={level}" for n, level in planned.items()),
            epoch,
        )
    return _applied(ctx.version, names)


def _in_the_cluster(
    ctx: RequestContext, request: m.UpdateFeaturesRequest, planned: dict[str, int], names: list[str]
) -> Parked:
    """Cluster mode: the checked levels go to ZooKeeper's ``/feature`` (see the
    module docstring); answered once written and read back here."""
    from trafka.brokerlite.cluster.view import ZkTask

    timeout_ms = max(request.timeout_ms, 0) or 60_000
    task = ZkTask("features", {"levels": planned, "timeout_ms": timeout_ms})

    def build() -> Response:
        code, message = task_outcome(task)
        if code:
            if code != ErrorCode.REQUEST_TIMED_OUT:
                code = ErrorCode.UNKNOWN_SERVER_ERROR
            return _failed(code, message or "the cluster's feature levels could not be written")
        log.info(
            "cluster feature levels updated by %r: %s",
            ctx.principal,
            ", ".join(f"{n}={level}" for n, level in planned.items()),
        )
        return _applied(ctx.version, names)

    return park_on_tasks(ctx, [task], timeout_ms, build)


def _applied(version: int, names: list[str]) -> Response:
    return Response(
        error_code=ErrorCode.NONE,
        error_message=None,
        results=[
            Response.UpdatableFeatureResult(
                feature=n, error_code=ErrorCode.NONE, error_message=None
            )
            for n in names
        ]
        if version <= _RESULTS_UNTIL
        else [],
    )


def _failed(code: ErrorCode, message: str | None) -> Response:
    return Response(error_code=code, error_message=message, results=[])


def error_response(
    request: m.UpdateFeaturesRequest | None, version: int, code: ErrorCode
) -> Response:
    return _failed(code, code.message)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="authorizer features cluster purgatory",
)
