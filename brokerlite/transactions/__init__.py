"""Exactly-once: idempotent producers, the transaction coordinator and the markers.

* :mod:`.producer_state` and :mod:`.eos`: each partition's producer state, kept in
  step with its log (deduplication, fencing, the last stable offset);
* :mod:`.coordinator` (``TransactionCoordinator``): Kafka's transaction protocol,
  composed of :mod:`.decisions`, :mod:`.transitions`, :mod:`.completion`,
  :mod:`.expiry` and :mod:`.describe`; its state in a journal file
  (:mod:`.journal`) or, in a cluster, in the replicated
  ``__transaction_state`` topic (:mod:`.replicated_journal`);
* :mod:`.markers`: outcomes carried out on this broker's partitions;
* cluster mode: :mod:`.cluster_mode` places the coordinator in a cluster,
  :mod:`.marker_queue` decides which markers go where, and
  :mod:`.marker_sender` (the one driver here, trio) sends them.

Rules: the decisions are sans-IO; only :mod:`.marker_sender` touches sockets.
"""
