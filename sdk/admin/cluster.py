"""The cluster and its features: DescribeCluster, the feature levels of
ApiVersions v3+ (KIP-584) and UpdateFeatures. Requests built and answers read
here, without I/O; :class:`~trafka.sdk.admin.Admin` sends them.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from trafka.codec import ApiKey, ErrorCode, KafkaError, UnsupportedVersionError
from trafka.codec.messages import k18_api_versions as av
from trafka.codec.messages import k57_update_features as upf
from trafka.codec.messages import k60_describe_cluster as dcl

from .._validate import INT16_MAX, check_instance, check_int, check_str, describe
from ..calls import TRANSIENT, check
from ..connection_state import SOFTWARE_NAME, SOFTWARE_VERSION
from ..errors import ArgumentTypeError, ArgumentValueError
from ..metadata import BrokerInfo
from ._common import answered, fit, partition_outcome

__all__ = [
    "ClusterDescription",
    "FeatureMetadata",
    "FeatureUpdate",
    "UpgradeType",
    "api_versions_request",
    "describe_cluster_request",
    "feature_updates",
    "read_describe_cluster",
    "read_features",
    "read_update_features",
    "update_features_request",
]


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerInfo, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class FeatureMetadata:
    """The feature levels (KIP-584) one broker reports in ApiVersions v3+.

    Attributes:
        finalized: feature name -> ``(min, max)`` level the cluster runs now
            (Kafka 3.3+ reports ``min`` as the ``max``'s floor, often equal to it).
        finalized_epoch: the epoch of those levels; None when the broker reports
            none (-1).
        supported: feature name -> ``(min, max)`` levels the broker can run.

    A broker older than ApiVersions v3 (Kafka 2.7) knows no features: all empty.
    """

    finalized: dict[str, tuple[int, int]]
    finalized_epoch: int | None
    supported: dict[str, tuple[int, int]]


class UpgradeType(enum.IntEnum):
    """How a feature level may move (KIP-778), as Java's ``FeatureUpdate.UpgradeType``.

    ``UPGRADE`` raises a level (or keeps it); the downgrades lower it, 0 removing
    the feature. ``SAFE_DOWNGRADE`` refuses a downgrade that would lose metadata;
    ``UNSAFE_DOWNGRADE`` allows it (for features with no metadata to lose, such
    as ``group.version``, the two are the same).
    """

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclasses.dataclass(frozen=True, slots=True)
class FeatureUpdate:
    """A new finalized level for one feature, as Java's ``FeatureUpdate``.

    Attributes:
        max_version_level: the level to finalize; 0 removes the feature (which
            needs a downgrade type).
        upgrade_type: :class:`UpgradeType`.
    """

    max_version_level: int
    upgrade_type: UpgradeType = UpgradeType.UPGRADE

    def __post_init__(self) -> None:
        check_int("max_version_level", self.max_version_level, minimum=0, maximum=INT16_MAX)
        if not isinstance(self.upgrade_type, UpgradeType):
            try:
                object.__setattr__(self, "upgrade_type", UpgradeType(self.upgrade_type))
            except ValueError:
                raise ArgumentValueError(
                    f"upgrade_type must be an UpgradeType, got {self.upgrade_type!r}"
                ) from None
        if self.max_version_level == 0 and self.upgrade_type == UpgradeType.UPGRADE:
            raise ArgumentValueError("level 0 removes a feature: use a downgrade upgrade_type")


def describe_cluster_request(version: int) -> Any:
    """DescribeCluster at ``version``."""
    return fit(ApiKey.DESCRIBE_CLUSTER, version, dcl.DescribeClusterRequest)


def read_describe_cluster(resp: Any) -> ClusterDescription:
    """The cluster a DescribeCluster answer describes.

    Raises:
        Again: a transient error (another attempt).
        KafkaError: any other error.
    """
    check(resp.error_code, "DescribeCluster", resp.error_message, again=TRANSIENT)
    brokers = tuple(BrokerInfo(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers)
    return ClusterDescription(resp.cluster_id, resp.controller_id, brokers)


def api_versions_request() -> av.ApiVersionsRequest:
    """The ApiVersions request whose answer (v3+) carries the feature levels."""
    return av.ApiVersionsRequest(
        client_software_name=SOFTWARE_NAME, client_software_version=SOFTWARE_VERSION
    )


def read_features(resp: Any) -> FeatureMetadata:
    """The feature levels of an ApiVersions answer (v3+).

    Raises:
        Again: a transient error.
        KafkaError: any other error.
    """
    check(resp.error_code, "ApiVersions", again=TRANSIENT)
    return FeatureMetadata(
        {f.name: (f.min_version_level, f.max_version_level) for f in resp.finalized_features or ()},
        None if resp.finalized_features_epoch < 0 else resp.finalized_features_epoch,
        {f.name: (f.min_version, f.max_version) for f in resp.supported_features or ()},
    )


def feature_updates(updates: Mapping[str, FeatureUpdate]) -> dict[str, FeatureUpdate]:
    """The updates, checked.

    Raises:
        ValueError: no updates, or an empty feature name.
    """
    if not isinstance(updates, Mapping):
        raise ArgumentTypeError(
            f"updates must be a mapping of feature names to FeatureUpdate, got {describe(updates)}"
        )
    wanted = dict(updates)
    for name, update in wanted.items():
        check_str(f"updates key {name!r}", name, empty=True)
        check_instance(f"updates[{name!r}]", update, FeatureUpdate)
    if not wanted:
        raise ArgumentValueError("no feature updates given")
    for name in wanted:
        if not name.strip():
            raise ArgumentValueError("a feature name must not be empty")
    return wanted


def update_features_request(
    version: int,
    updates: Mapping[str, FeatureUpdate],
    *,
    timeout_ms: int,
    validate_only: bool,
) -> Any:
    """UpdateFeatures at ``version``: v0 has no upgrade type, so a downgrade is
    sent as ``AllowDowngrade``.

    Raises:
        UnsupportedVersionError: ``validate_only`` at v0, which cannot carry it.
    """
    if validate_only and version < 1:
        raise UnsupportedVersionError(
            "the broker's UpdateFeatures is v0, which has no validate_only"
        )
    req = upf.UpdateFeaturesRequest
    keys = [
        req.FeatureUpdateKey(
            feature=name,
            max_version_level=u.max_version_level,
            allow_downgrade=u.upgrade_type != UpgradeType.UPGRADE,
        )
        if version == 0
        else req.FeatureUpdateKey(
            feature=name,
            max_version_level=u.max_version_level,
            upgrade_type=int(u.upgrade_type),
        )
        for name, u in updates.items()
    ]
    return fit(
        ApiKey.UPDATE_FEATURES,
        version,
        req,
        timeout_ms=timeout_ms,
        feature_updates=keys,
        validate_only=validate_only,
    )


def read_update_features(version: int, resp: Any, names: list[str]) -> dict[str, KafkaError | None]:
    """Per feature of ``names``, None when applied, else its error (v0-v1 answer
    per feature; v2 once for the request).

    Raises:
        Again: a transient error or NOT_CONTROLLER (after a metadata refresh).
        KafkaError: the request as a whole was refused, or a feature was not answered.
    """
    again = TRANSIENT | {ErrorCode.NOT_CONTROLLER}
    check(resp.error_code, "UpdateFeatures", resp.error_message, again=again, refresh=True)
    if version >= 2:  # one answer for the request, which succeeded
        return dict.fromkeys(names)
    out = {
        r.feature: partition_outcome(
            r.error_code, r.error_message, f"updating feature {r.feature!r}"
        )
        for r in resp.results or ()
    }
    return answered(names, out, "updating feature")
