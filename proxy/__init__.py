"""trafka.proxy: a Kafka protocol proxy.

Clients connect to the proxy as to a broker. It forwards their requests to the
real cluster, tells them the proxy's own addresses in place of the brokers'
(so that every later connection goes through it too), and routes each keyed
record to the partition its key hashes to (Java's murmur2 by default),
whichever client produced it and whatever partitioner that client uses::

    async with serve_proxy(upstream=("kafka:9092",), port=19092) as running:
        ...  # clients use running.bootstrap_servers

or ``trafka proxy --upstream kafka:9092 --listen 0.0.0.0:19092 --advertised-host proxy``.
The core is :mod:`.server` (listeners, per-client pumps, the filter chain) and
:mod:`.pool` (its shared upstream connections); address rewriting
(:mod:`.rewrite`), the SASL watch (:mod:`.principals`) and key routing (the
package :mod:`.keyrouting`) are filters the chain holds;
:func:`run_workers` (:mod:`.workers`) runs several proxy processes behind one
bootstrap port (``trafka proxy --workers N``). User code sees
and changes decoded requests and answers through :class:`Filter`
(:mod:`.filters`); key routing is itself a filter, :class:`KeyRouting`, and
:class:`SchemaValidation` refuses records without their topic's schema.
"""

from .assembly import proxy_in_thread, serve_proxy
from .config import ProxyConfig
from .filters import (
    CloseAfter,
    CloseConnection,
    EncodedBody,
    Filter,
    FilterContext,
    ProxyServices,
    Respond,
    RespondLater,
    Sample,
    Session,
)
from .keyrouting import KeyRouting, RouteStats
from .keyrouting.plan import HASHES, ORIGIN_HEADER, parse_origin_header
from .listeners import NamedListener
from .schema_validation import SchemaValidation
from .server import ProxyStatistics, RunningProxy
from .workers import run_workers

__all__ = [
    "HASHES",
    "ORIGIN_HEADER",
    "CloseAfter",
    "CloseConnection",
    "EncodedBody",
    "Filter",
    "FilterContext",
    "KeyRouting",
    "NamedListener",
    "ProxyServices",
    "Respond",
    "RespondLater",
    "Sample",
    "Session",
    "ProxyConfig",
    "ProxyStatistics",
    "RouteStats",
    "SchemaValidation",
    "RunningProxy",
    "proxy_in_thread",
    "parse_origin_header",
    "run_workers",
    "serve_proxy",
]
