"""What request handlers share: the request context, the ports and the handler spec.

Rules and invariants:

* A handler is pure protocol logic: it receives a :class:`RequestContext` and
  the decoded request body, reads and changes broker state through the
  context's narrow attributes (``ctx.logs``, ``ctx.groups``, ``ctx.txn``,
  ``ctx.cluster``, ``ctx.config``, ``ctx.authorizer``... and ``ctx.session``,
  its connection), and returns either a response body (a generated response
  dataclass, or a :class:`~trafka.brokerlite.outcomes.PartsBody` such as the
  Fetch response plan) or one of the core's outcomes (:mod:`trafka.brokerlite.outcomes`:
  ``NoResponse``, ``Parked``, ``Close``, which may carry a last answer to send
  before closing). It never blocks, never sleeps
  and never touches a socket.
  Parked requests go through ``ctx.park`` and ``ctx.purgatory``, transaction
  markers through ``ctx.markers``.
* **Each handler declares the ports it uses.** A port (:class:`Port`) is one of
  the broker's parts as the context offers it, named as the attribute
  (``Port.SHARE_GROUPS`` is ``ctx.share_groups``); the handler's
  :attr:`HandlerSpec.uses` names exactly those its ``handle`` reaches
  (``uses="groups authorizer"``): directly, through the context's helpers
  (``ctx.allowed`` uses the authorizer, ``ctx.park`` the purgatory,
  ``ctx.mutation_quota`` the quotas...) or through the helpers it hands ``ctx`` to. ``tests/brokerlite/test_handler_ports.py``
  follows ``ctx`` through each handler's code and fails on a port used but not
  declared, one declared but not used, and a ``ctx`` it cannot follow (stored
  somewhere it does not see, or given to a function outside the handlers). The
  request itself (``ctx.version``, ``ctx.now_ms``, ``ctx.session``,
  ``ctx.principal``, ``ctx.reply``...) and the broker's identity
  (:data:`IDENTITY`: ``ctx.node_id``, ``ctx.cluster_id``, ``ctx.advertised``,
  constants) are not ports.
* ``ctx.broker`` (``Port.BROKER``) is left for the few operations of the broker as
  a whole, those that span several of its parts: a topic's deletion or resize,
  reopening an offline partition, the min-ISR check of an ``acks=all`` write,
  OffsetFetch's pending offsets, the advertised versions. Only
  :class:`BrokerPort`'s methods are reached through it, never its parts (the
  test refuses ``ctx.broker.logs``: that is ``ctx.logs``, declared as such).
* A handler never lets a storage or coordinator error escape for one
  topic/partition: it reports it as that entry's error code. An exception that
  does escape is a bug; the broker logs it and answers with
  UNKNOWN_SERVER_ERROR where the API has an error field.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import operator
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from trafka.brokerlite.clock import mono_ms
from trafka.brokerlite.outcomes import Parked, Reply, Waiter
from trafka.brokerlite.security.authorizer import ANONYMOUS, RESOURCE_OPERATIONS
from trafka.codec.errors import ErrorCode
from trafka.codec.protocol import api

if TYPE_CHECKING:
    from trafka.brokerlite.cluster.view import ClusterView
    from trafka.brokerlite.config import BrokerConfig
    from trafka.brokerlite.features import FeatureStore
    from trafka.brokerlite.fetch_sessions import FetchManager
    from trafka.brokerlite.groups.coordinator import GroupCoordinator
    from trafka.brokerlite.groups.share_groups import ShareGroups
    from trafka.brokerlite.metrics import BrokerMetrics
    from trafka.brokerlite.purgatory import Purgatory
    from trafka.brokerlite.quotas import MutationQuota, Quotas
    from trafka.brokerlite.security.authorizer import Authorizer
    from trafka.brokerlite.security.delegation_tokens import DelegationTokens
    from trafka.brokerlite.security.scram import ScramCredentials
    from trafka.brokerlite.session import ConnectionSession
    from trafka.brokerlite.shares.coordinator import ShareCoordinator
    from trafka.brokerlite.shares.fetcher import ShareFetcher
    from trafka.brokerlite.shares.offsets_port import ShareOffsetsPort
    from trafka.brokerlite.storage.log_manager import LogManager
    from trafka.brokerlite.telemetry import ClientTelemetry
    from trafka.brokerlite.transactions.cluster_mode import ClusterTransactions
    from trafka.brokerlite.transactions.coordinator import TransactionCoordinator
    from trafka.brokerlite.transactions.eos import ProducerStates, TxnVerifier
    from trafka.brokerlite.transactions.markers import TransactionMarkers
    from trafka.brokerlite.transactions.verification import TxnVerification
    from trafka.codec.messages.headers import RequestHeader

__all__ = [
    "IDENTITY",
    "BrokerPort",
    "HandlerSpec",
    "Partitions",
    "Port",
    "RequestContext",
    "Versions",
]


class Port(enum.Flag):
    """A part of the broker that a handler reaches through its :class:`RequestContext`.

    Each member is the context attribute of the same name in lower case
    (``Port.SHARE_GROUPS`` is ``ctx.share_groups``), and a handler declares
    those it uses by these names: ``HandlerSpec(..., uses="logs cluster")``.
    """

    NONE = 0
    CONFIG = enum.auto()
    LOGS = enum.auto()
    PRODUCERS = enum.auto()
    CLUSTER = enum.auto()
    GROUPS = enum.auto()
    SHARE_GROUPS = enum.auto()
    SHARES = enum.auto()
    SHARE_COORDINATOR = enum.auto()
    SHARE_OFFSETS = enum.auto()
    TXN = enum.auto()
    CLUSTER_TXN = enum.auto()
    FETCH_SESSIONS = enum.auto()
    AUTHORIZER = enum.auto()
    QUOTAS = enum.auto()
    FEATURES = enum.auto()
    SCRAM = enum.auto()
    TOKENS = enum.auto()
    TELEMETRY = enum.auto()
    METRICS = enum.auto()
    VERIFY_TRANSACTIONAL = enum.auto()
    TXN_VERIFICATION = enum.auto()
    MARKERS = enum.auto()
    PURGATORY = enum.auto()
    # The broker as a whole, for BrokerPort's operations that span its parts.
    BROKER = enum.auto()


# The context attributes that say which broker this is: constants every handler
# may read, so not ports.
IDENTITY = frozenset({"node_id", "cluster_id", "advertised"})


class Partitions(Protocol):
    """What reading and writing partitions needs: the logs, the producer states
    and the cluster view. A :class:`RequestContext` is one, and so is the broker."""

    @property
    def logs(self) -> LogManager: ...

    @property
    def producers(self) -> ProducerStates: ...

    @property
    def cluster(self) -> ClusterView | None: ...


class BrokerPort(Protocol):
    """The broker core as a handler sees it: its parts, and the few operations of
    the broker as a whole (:class:`~trafka.brokerlite.broker.Broker` is one).

    Declared here, beside the handlers, so that they do not import the broker
    that dispatches to them: the core sits above its handlers.
    """

    config: BrokerConfig
    node_id: int
    cluster_id: str
    advertised: tuple[str, int]
    logs: LogManager
    producers: ProducerStates
    cluster: ClusterView | None
    groups: GroupCoordinator
    share_groups: ShareGroups
    shares: ShareFetcher
    share_coordinator: ShareCoordinator | None
    share_offsets: ShareOffsetsPort
    txn: TransactionCoordinator
    cluster_txn: ClusterTransactions | None
    fetch_sessions: FetchManager
    authorizer: Authorizer | None
    quotas: Quotas
    features: FeatureStore
    scram: ScramCredentials
    tokens: DelegationTokens
    telemetry: ClientTelemetry
    metrics: BrokerMetrics
    verify_transactional: TxnVerifier
    txn_verification: TxnVerification | None
    markers: TransactionMarkers
    purgatory: Purgatory

    def api_versions(self) -> list[tuple[int, int, int]]: ...

    def check_min_isr(self, topic: str, partition: int) -> ErrorCode: ...

    def pending_offset_partitions(self, group_id: str) -> set[tuple[str, int]]: ...

    def reopen_partition(self, topic: str, partition: int, now_ms: int) -> bool: ...

    def notify_topic_changed(self, topic: str, *, deleted: bool) -> None: ...


@dataclasses.dataclass(slots=True)
class RequestContext:
    """One request being handled.

    Attributes:
        broker: the broker core (state, storage, coordinator, config).
        session: the connection the request came on
            (:class:`~trafka.brokerlite.session.ConnectionSession`).
        header: the decoded request header.
        now_ms: wall-clock time in milliseconds, given by the driver (a
            :class:`~trafka.brokerlite.clock.Now`, carrying the monotonic reading too).
    """

    broker: BrokerPort
    session: ConnectionSession
    header: RequestHeader
    now_ms: int

    @property
    def mono_ms(self) -> int:
        """The monotonic milliseconds of ``now_ms``: what a parked request's
        ``deadline_ms`` is measured on (see :mod:`trafka.brokerlite.clock`)."""
        return mono_ms(self.now_ms)

    @property
    def conn_id(self) -> int:
        """The id of the connection the request came on."""
        return self.session.conn_id

    # -- the broker's parts a handler may use (narrow views of ``broker``) ---------------

    @property
    def config(self) -> BrokerConfig:
        """The broker's settings."""
        return self.broker.config

    @property
    def node_id(self) -> int:
        return self.broker.node_id

    @property
    def cluster_id(self) -> str:
        return self.broker.cluster_id

    @property
    def advertised(self) -> tuple[str, int]:
        """The (host, port) clients are given for this broker."""
        return self.broker.advertised

    @property
    def logs(self) -> LogManager:
        """Topics and partition logs."""
        return self.broker.logs

    @property
    def producers(self) -> ProducerStates:
        """Idempotent producers' state; every write to a partition goes through it."""
        return self.broker.producers

    @property
    def cluster(self) -> ClusterView | None:
        """What this broker knows of its cluster (cluster mode), else None."""
        return self.broker.cluster

    @property
    def groups(self) -> GroupCoordinator:
        """The consumer group coordinator."""
        return self.broker.groups

    @property
    def share_groups(self) -> ShareGroups:
        """The share group coordinator (KIP-932)."""
        return self.broker.share_groups

    @property
    def shares(self) -> ShareFetcher:
        """Share sessions and share-partitions (ShareFetch, ShareAcknowledge)."""
        return self.broker.shares

    @property
    def share_coordinator(self) -> ShareCoordinator | None:
        """The share coordinator of ``__share_group_state`` (cluster mode), else None."""
        return self.broker.share_coordinator

    @property
    def share_offsets(self) -> ShareOffsetsPort:
        """Share state as the share-group offsets admin reads and changes it."""
        return self.broker.share_offsets

    @property
    def txn(self) -> TransactionCoordinator:
        """The transaction coordinator."""
        return self.broker.txn

    @property
    def cluster_txn(self) -> ClusterTransactions | None:
        """The cluster side of the transaction coordinator (cluster mode), else None."""
        return self.broker.cluster_txn

    @property
    def fetch_sessions(self) -> FetchManager:
        """Incremental fetch sessions (KIP-227)."""
        return self.broker.fetch_sessions

    @property
    def authorizer(self) -> Authorizer | None:
        """The ACL authorizer, None when none is configured."""
        return self.broker.authorizer

    @property
    def quotas(self) -> Quotas:
        return self.broker.quotas

    @property
    def features(self) -> FeatureStore:
        return self.broker.features

    @property
    def scram(self) -> ScramCredentials:
        return self.broker.scram

    @property
    def tokens(self) -> DelegationTokens:
        return self.broker.tokens

    @property
    def telemetry(self) -> ClientTelemetry:
        """Client metrics subscriptions and instances (KIP-714)."""
        return self.broker.telemetry

    @property
    def metrics(self) -> BrokerMetrics:
        return self.broker.metrics

    @property
    def verify_transactional(self) -> TxnVerifier:
        """Checks a transactional Produce against its transaction (KIP-890 part 1)."""
        return self.broker.verify_transactional

    @property
    def txn_verification(self) -> TxnVerification | None:
        """Cluster mode: verification of transactional Produce with a coordinator
        that may be another broker (KIP-890 part 1); None on a single node."""
        return self.broker.txn_verification

    @property
    def markers(self) -> TransactionMarkers:
        """Transaction markers written here (deferred after an answer, or asked for)."""
        return self.broker.markers

    @property
    def purgatory(self) -> Purgatory:
        """The requests parked in the core: wake them (``notify_append``), or queue
        the coordinator's answers for their connections (``release``)."""
        return self.broker.purgatory

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with id ``topic_id``, or None."""
        info = self.logs.topic_by_id(topic_id)
        return None if info is None else info.name

    # -- the request ----------------------------------------------------------------------

    @property
    def version(self) -> int:
        return self.header.request_api_version

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    @property
    def principal(self) -> str:
        """The connection's principal for ACLs (``User:alice``, ``User:ANONYMOUS``)."""
        return self.session.principal

    def token_requests_allowed(self) -> bool:
        """Whether the connection may use the delegation-token APIs (Kafka's
        ``allowTokenRequests``): not one that logged in with a token, nor one on a
        PLAINTEXT listener, nor an SSL one without a client certificate."""
        protocol = self.config.security_protocol
        if self.session.token_login or protocol == "PLAINTEXT":
            return False
        return not (protocol == "SSL" and self.principal == ANONYMOUS)

    def allowed(self, operation: int, resource_type: int, name: str) -> bool:
        """Whether this request's principal may do ``operation`` on the resource
        (:mod:`trafka.brokerlite.security.authorizer`; always without an authorizer)."""
        authorizer = self.authorizer
        if authorizer is None:
            return True
        return authorizer.authorize(
            self.principal, self.session.host, operation, resource_type, name
        )

    def allowed_on_some(self, operation: int, resource_type: int) -> bool:
        """Whether the principal may do ``operation`` on some resource of the type
        (Kafka's ``authorizeByResourceType``; always without an authorizer)."""
        authorizer = self.authorizer
        if authorizer is None:
            return True
        return authorizer.authorize_by_type(
            self.principal, self.session.host, operation, resource_type
        )

    def authorized_operations(self, resource_type: int, name: str) -> int:
        """The KIP-430 bit field of what the principal may do on the resource."""
        authorizer = self.authorizer
        if authorizer is None:
            return sum(1 << op for op in RESOURCE_OPERATIONS.get(resource_type, ()))
        return authorizer.authorized_operations(
            self.principal, self.session.host, resource_type, name
        )

    def mutation_quota(self, strict_from: int) -> MutationQuota:
        """This request's ``controller_mutation_rate`` quota (KIP-599), strict
        (THROTTLING_QUOTA_EXCEEDED per topic) from version ``strict_from`` on."""
        return self.quotas.mutations(
            self.session.quota_user,
            self.header.client_id or "",
            strict=self.header.request_api_version >= strict_from,
            now_ms=self.now_ms,
        )

    def park(self, waiter: Waiter) -> Parked:
        """Park this request until ``waiter`` completes: its reply is built by
        ``waiter.complete(now_ms)`` and returned by ``Broker.poll`` when data
        arrives on a watched partition and the waiter accepts it, when
        ``waiter.deadline_ms`` passes, or when a watched topic is deleted or
        changed (:mod:`trafka.brokerlite.purgatory`)."""
        return self.purgatory.park(self.session, self.header, waiter)

    def group_token(self) -> tuple[int, int]:
        """A token for this request, which the group coordinator may park
        (JoinGroup, SyncGroup)."""
        return self.purgatory.group_token(self.session.conn_id)

    def group_outcome(self, token: tuple[int, int], released: Any) -> Any:
        """This request's answer among the coordinator's ``(token, response)``
        pairs (the others are queued for their connections), or :class:`Parked`
        when the coordinator holds it."""
        return self.purgatory.group_outcome(self.session, self.header, token, released)

    def reply(self, body: Any) -> Reply:
        """``body`` as the answer to this request."""
        header = self.header
        return Reply(
            header.correlation_id, header.request_api_key, header.request_api_version, body
        )


class Versions(NamedTuple):
    """A :class:`HandlerSpec`'s version fields (see there), without its
    handler: what ApiVersions and the version checks need, so that the handler
    index (``_index.py``) answers them without importing the handler's module."""

    min_version: int
    max_version: int
    advertised_min: int | None
    old_min: int | None

    def served(self, protocol_version: str) -> tuple[int, int]:
        """(lowest, highest) version served under ``protocol_version``."""
        if protocol_version != "4.0" and self.old_min is not None:
            return self.old_min, self.max_version
        return self.min_version, self.max_version

    def advertised(self, protocol_version: str) -> tuple[int, int]:
        """(lowest, highest) version ApiVersions reports under ``protocol_version``."""
        low, high = self.served(protocol_version)
        if self.advertised_min is not None:
            low = min(low, self.advertised_min)
        return low, high


@dataclasses.dataclass(frozen=True, slots=True)
class HandlerSpec:
    """One API as brokerlite serves it.

    Attributes:
        api_key: the API key.
        min_version, max_version: the versions served and advertised.
        handle: ``(ctx, request) -> body | Outcome``.
        error_response: ``(request, version, code) -> body``: the response
            reporting ``code`` for everything the request asked (used for
            unsupported versions and internal errors); ``None`` when the API
            has no way to report an error.
        advertised_min: the minimum version ApiVersions reports when it differs
            from ``min_version`` under ``protocol_version`` 4.0 (see the Produce
            handler).
        old_min: the lowest version served under ``protocol_version`` 3.9 (the
            default) when it is below ``min_version``: the versions Kafka 4.0
            removed (KIP-896) and Kafka 3.9 still served.
        feature: the feature (KIP-584, :mod:`trafka.brokerlite.features`) the
            API belongs to: while it is not finalized (level 0) every request is
            answered ``error_response(..., UNSUPPORTED_VERSION)``, as Kafka does.
            The API stays in ApiVersions, as in Kafka.
        uses: the ports ``handle`` reaches through its context, all of them
            and no others, named as the context's attributes and separated by
            spaces (``"groups authorizer"``); the module docstring says how
            this is checked.
        ports: ``uses`` as :class:`Port` flags.
    """

    api_key: int
    min_version: int
    max_version: int
    handle: Callable[[RequestContext, Any], Any]
    error_response: Callable[[Any, int, ErrorCode], Any] | None
    advertised_min: int | None = None
    feature: str | None = None
    old_min: int | None = None
    uses: str = ""
    ports: Port = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = self.uses.split()
        unknown = [n for n in names if n.upper() not in Port.__members__ or n != n.lower()]
        if unknown or len(set(names)) != len(names) or "none" in names:
            raise ValueError(
                f"API {self.api_key}: uses={self.uses!r} must name ports (Port's members "
                "in lower case), each once"
            )
        object.__setattr__(
            self,
            "ports",
            functools.reduce(operator.or_, (Port[n.upper()] for n in names), Port.NONE),
        )
        if self.feature is not None and self.error_response is None:
            raise ValueError(f"API {self.api_key}: a feature-gated API needs an error_response")
        info = api(self.api_key)
        if not info.min_version <= self.min_version <= self.max_version <= info.max_version:
            raise ValueError(
                f"{info.name}: versions {self.min_version}-{self.max_version} outside the "
                f"codec's {info.min_version}-{info.max_version}"
            )
        if self.old_min is not None and not info.min_version <= self.old_min < self.min_version:
            raise ValueError(f"{info.name}: old_min {self.old_min} is not an older version")

    @property
    def versions(self) -> Versions:
        """The version fields, what the handler index (``_index.py``) records."""
        return Versions(self.min_version, self.max_version, self.advertised_min, self.old_min)

    def served(self, protocol_version: str) -> tuple[int, int]:
        """(lowest, highest) version served under ``protocol_version``."""
        return self.versions.served(protocol_version)

    def advertised(self, protocol_version: str) -> tuple[int, int]:
        """(lowest, highest) version ApiVersions reports under ``protocol_version``."""
        return self.versions.advertised(protocol_version)

    def refusal(self, request: Any, version: int, code: ErrorCode) -> Any:
        """``error_response(request, version, code)`` (the API must have one)."""
        assert self.error_response is not None
        return self.error_response(request, version, code)
