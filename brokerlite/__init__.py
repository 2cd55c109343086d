"""brokerlite: a small, single-node, Kafka-compatible broker.

The embedded default that tests, the demo and developer laptops run: real
Kafka clients (librdkafka, kcat, kafka-python, aiokafka) work against it
unchanged. Start it with ``trafka broker`` or, from Python::

    async with serve_broker(port=0) as running:
        ...  # clients connect to running.bootstrap_servers

or, for synchronous code, ``with broker_in_thread(port=0) as running: ...``.
See ``docs/brokerlite.md`` for the options and the APIs served.
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
