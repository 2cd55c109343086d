"""Which transaction protocol a transactional producer follows, without I/O.

Transaction version 2 (KIP-890 part 2) is the cluster's finalized feature
``transaction.version`` at level 2 or more (KIP-584 finalized features, from
the brokers' ApiVersions answers). The producer follows it as Kafka's Java
client does (its ``TransactionManager.maybeUpdateTransactionV2Enabled``):

* The level is read from the newest finalized features any broker reported
  (the highest finalized-features epoch; :attr:`TxnVersion.features`, the
  driver's), once ``init_transactions()`` got its producer id, and again each
  time a commit or abort begins, after that transaction's own flow is fixed. A
  reading whose epoch is not newer than the last one read changes nothing.
* A transaction keeps the flow it began with; the next one takes the new one.
* Moving up to version 2 after init asks for an epoch bump once the ending
  transaction's EndTxn is answered (:meth:`TxnVersion.update` returns True), so
  that nothing of the version 1 transaction counts in the next one (the
  coordinator fences the old epoch). Moving down needs no bump.

What changes in version 2 (the transaction manager's, :mod:`.transactions`):
no AddPartitionsToTxn (a partition's leader adds it with the first Produce,
v12+), no AddOffsetsToTxn (TxnOffsetCommit v5 to the group coordinator adds
the offsets), and EndTxn v5, whose answer carries the epoch the coordinator
bumped to (every commit and abort bumps it), so a sequence gap needs no bump of
the client's own. In version 1 EndTxn and TxnOffsetCommit stay at v4 at most
(:data:`TV1_MAX_VERSIONS`) and a transaction's Produce at v11
(``producer_batches.produce_version``).
"""

from __future__ import annotations

from collections.abc import Callable

from trafka.codec import ApiKey

__all__ = ["TRANSACTION_VERSION", "TV1_MAX_VERSIONS", "TxnVersion"]

#: The feature that names the transaction protocol.
TRANSACTION_VERSION = "transaction.version"
#: The highest versions transaction version 1 sends (v5 of both is version 2's).
TV1_MAX_VERSIONS = {ApiKey.END_TXN: 4, ApiKey.TXN_OFFSET_COMMIT: 4}


def _none() -> tuple[int, dict[str, int]]:
    return -1, {}


class TxnVersion:
    """The transaction version a producer follows for its next transaction.

    Attributes:
        tv2: transaction version 2 (else 1).
        features: ``() -> (epoch, {feature: level})``, the newest finalized
            features any broker reported (none until the driver sets it).
    """

    __slots__ = ("_epoch", "features", "tv2")

    def __init__(self) -> None:
        self.tv2 = False
        self.features: Callable[[], tuple[int, dict[str, int]]] = _none
        self._epoch = -1

    def update(self, *, on_init: bool) -> bool:
        """Read the finalized level again; whether the epoch must be bumped
        (moved up to version 2, not ``on_init``)."""
        epoch, features = self.features()
        if epoch <= self._epoch:
            return False
        self._epoch = epoch
        was, self.tv2 = self.tv2, features.get(TRANSACTION_VERSION, 0) >= 2
        return self.tv2 and not was and not on_init
