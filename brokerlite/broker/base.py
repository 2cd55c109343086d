"""What the broker's parts are, declared once for the mixins that make up :class:`Broker`.

:class:`~trafka.brokerlite.broker.Broker` is the composition root: its
``__init__`` builds these parts in order (``broker/__init__.py``), and its
capabilities are mixins over this class, each in its own module: answering
requests (``dispatch.py``), the connections' sessions (``connections.py``),
parked requests and periodic work (``polling.py``) and the cluster-mode glue
(``cluster_host.py``). They share one set of parts, not copies, so the parts
are declared here, with their types, and assigned by the root.
"""

from __future__ import annotations

from pathlib import Path

from ..cluster.view import ClusterView
from ..config import BrokerConfig
from ..features import FeatureStore
from ..fetch_sessions import FetchManager
from ..groups.coordinator import GroupCoordinator
from ..groups.share_groups import ShareGroups
from ..metrics import BrokerMetrics
from ..purgatory import Purgatory
from ..quotas import Quotas
from ..security.authorizer import Authorizer
from ..security.delegation_tokens import DelegationTokens
from ..security.sasl import UserStore
from ..security.scram import ScramCredentials
from ..session import ConnectionSession, SaslPolicy
from ..shares.coordinator import ShareCoordinator
from ..shares.fetcher import ShareFetcher
from ..shares.offsets_port import ShareOffsetsPort
from ..shares.persister import RemotePersister
from ..storage.log_manager import LogManager
from ..storage.node_meta import ClusterProducerIds, ProducerIdAllocator
from ..telemetry import ClientTelemetry
from ..transactions.cluster_mode import ClusterTransactions
from ..transactions.coordinator import TransactionCoordinator
from ..transactions.eos import ProducerStates, TxnVerifier
from ..transactions.markers import TransactionMarkers

__all__ = ["BrokerParts"]


class BrokerParts:
    """The parts of a broker (see :class:`~trafka.brokerlite.broker.Broker` for their roles)."""

    config: BrokerConfig
    #: The time of the request or poll being handled (what the driver passed in).
    _now_ms: int
    data_dir: Path
    node_id: int
    advertised: tuple[str, int]
    sasl_users: UserStore | None
    _sasl_policy: SaslPolicy | None
    #: The open connections' sessions (everything known of a connection is there).
    _sessions: dict[int, ConnectionSession]
    logs: LogManager
    fresh_data_dir: bool
    cluster_id: str
    _producer_ids: ProducerIdAllocator | ClusterProducerIds
    cluster_txn: ClusterTransactions | None
    share_groups: ShareGroups
    scram: ScramCredentials
    groups: GroupCoordinator
    txn: TransactionCoordinator
    producers: ProducerStates
    shares: ShareFetcher
    share_coordinator: ShareCoordinator | None
    share_persister: RemotePersister | None
    share_offsets: ShareOffsetsPort
    authorizer: Authorizer | None
    quotas: Quotas
    tokens: DelegationTokens
    features: FeatureStore
    telemetry: ClientTelemetry
    verify_transactional: TxnVerifier
    markers: TransactionMarkers
    fetch_sessions: FetchManager
    purgatory: Purgatory
    _next_retention_ms: int
    _next_flush_ms: int
    _next_producer_expiry_ms: int
    _closed: bool
    metrics: BrokerMetrics
    cluster: ClusterView | None

    def notify_append(self, topic: str, partition: int, nbytes: int) -> None:
        """Data was appended to a partition: wake the parked requests that wanted it."""
        self.purgatory.notify_append(topic, partition, nbytes)
