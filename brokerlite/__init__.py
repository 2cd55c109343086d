"""brokerlite: a small Kafka-compatible broker, on one node or in a cluster.

The embedded default that tests, the demo and developer laptops run: real
Kafka clients (librdkafka, kcat, kafka-python, aiokafka) work against it
unchanged. One broker serves alone; several form a cluster over ZooKeeper
(Kafka's ZooKeeper-era design: replication, elections, reassignments), as
``trafka cluster`` and :func:`~trafka.brokerlite.dev.local_cluster.serve_cluster`
start on one machine. Start a single broker with ``trafka broker`` or, from Python::

    async with serve_broker(port=0) as running:
        ...  # clients connect to running.bootstrap_servers

or, for synchronous code, ``with broker_in_thread(port=0) as running: ...``.
See ``docs/brokerlite.md`` for the options and the APIs served.

The package is laid out by capability (``docs/design.md``): the core
(:mod:`.broker`, :mod:`.intake`, :mod:`.session`, :mod:`.purgatory`,
:mod:`.outcomes`) and its trio driver (:mod:`.server`); one handler per API key
(:mod:`.handlers`, each declaring the ports, the broker's parts, it uses); the
wings the handlers reach, :mod:`.storage`, :mod:`.groups`, :mod:`.shares`,
:mod:`.transactions`, :mod:`.cluster` and :mod:`.security`; and the
development launchers (:mod:`.dev`), which the broker never imports.
"""

from __future__ import annotations

from .config import BrokerConfig, ConfigError
from .server import RunningBroker, broker_in_thread, run_broker, serve_broker

__all__ = [
    "BrokerConfig",
    "ConfigError",
    "RunningBroker",
    "broker_in_thread",
    "run_broker",
    "serve_broker",
]
