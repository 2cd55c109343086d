"""A client's statistics in librdkafka's JSON layout, for ``stats_cb``.

librdkafka's ``statistics.interval.ms`` hands ``stats_cb`` a JSON document
(its STATISTICS.md) that dashboards are fed from. :func:`librdkafka_json`
writes trafka's snapshot (:class:`~.producing.ProducerStatistics`,
:class:`~.consuming.ConsumerStatistics` or :class:`~.brokers.AdminStatistics`)
in that layout.

Rules:

* Only fields trafka knows are written, each with librdkafka's meaning and
  unit (``ts`` and ``age`` in microseconds, ``time`` in seconds): a field
  trafka does not count is left out, never written as a made-up zero. An
  offset not known yet is librdkafka's -1001 (``RD_KAFKA_OFFSET_INVALID``),
  a lag not known -1, as librdkafka writes them.
* Top level: ``name``, ``client_id``, ``type``, ``ts``, ``time``, ``age``,
  ``msg_cnt`` (records buffered), ``msg_size`` (their buffer bytes),
  ``msg_size_max`` (``buffer.memory``), ``tx``/``tx_bytes``/``rx``/``rx_bytes``
  (requests and responses, over all brokers), ``txmsgs``/``txmsg_bytes``
  (records and their bytes acknowledged by brokers), ``rxmsgs``/``rxmsg_bytes``
  (records handed to the application, bytes fetched), ``brokers``, ``topics``
  and, for a consumer in a group, ``cgrp``.
* ``brokers`` is keyed ``host:port/id`` as librdkafka's, here ``node-id/id``
  (trafka's snapshot names nodes, not addresses); ``topics.<t>.partitions``
  by the partition number as a string.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["OFFSET_INVALID", "librdkafka_json", "librdkafka_stats"]

#: librdkafka's RD_KAFKA_OFFSET_INVALID: an offset not known.
OFFSET_INVALID = -1001


def _broker(stats: Any) -> dict[str, Any]:
    window = stats.window
    out: dict[str, Any] = {
        "name": f"{stats.node_name}/{stats.node_id}",
        "nodeid": stats.node_id,
        "nodename": stats.node_name,
        "source": "learned" if stats.node_id >= 0 else "configured",
        "state": "UP" if stats.connected else "DOWN",
        "waitresp_cnt": stats.in_flight,
        "tx": stats.requests_sent,
        "txbytes": stats.bytes_sent,
        "txerrs": stats.requests_failed,
        "rx": stats.responses_received,
        "rxbytes": stats.bytes_received,
        "connects": stats.connects,
        "disconnects": stats.disconnects,
        "req": {name: api.requests for name, api in stats.apis.items()},
        "throttle": {
            "cnt": stats.throttle.count,
            "sum": stats.throttle.total_ms * 1000,
            "max": (stats.throttle.max_ms or 0) * 1000,
        },
    }
    if window is not None:
        # librdkafka's rtt window is in microseconds.
        # (NaN while the window has no request: librdkafka's 0 then)
        out["rtt"] = {
            "avg": _us(window.request_latency_avg_ms),
            "max": _us(window.request_latency_max_ms),
        }
    return out


def _us(ms: float) -> int:
    return 0 if math.isnan(ms) else int(ms * 1000)


def _topics(partitions: Mapping[Any, Any], fill: Any) -> dict[str, Any]:
    topics: dict[str, Any] = {}
    for tp, stats in sorted(partitions.items(), key=lambda item: (item[0][0], item[0][1])):
        topic = topics.setdefault(tp[0], {"topic": tp[0], "partitions": {}})
        topic["partitions"][str(tp[1])] = {"partition": tp[1], **fill(stats)}
    return topics


def _produced(stats: Any) -> dict[str, Any]:
    return {
        "msgq_cnt": stats.records_queued,
        "msgq_bytes": stats.bytes_queued,
        "txmsgs": stats.records_sent,
        "txbytes": stats.bytes_sent,
    }


def _consumed(stats: Any) -> dict[str, Any]:
    position = OFFSET_INVALID if stats.position is None else stats.position
    return {
        "rxmsgs": stats.records_consumed,
        "rxbytes": stats.bytes_fetched,
        "fetch_state": "stopped" if stats.paused else "active",
        "next_offset": position,
        "app_offset": position,
        "hi_offset": stats.high_watermark if stats.high_watermark >= 0 else OFFSET_INVALID,
        "consumer_lag": -1 if stats.lag is None else stats.lag,
    }


def librdkafka_stats(
    stats: Any, *, kind: str, name: str, client_id: str, ts_us: int, time_s: int, age_us: int
) -> dict[str, Any]:
    """``stats`` (a client's snapshot) in librdkafka's layout, as a dict.

    Args:
        kind: ``producer``, ``consumer``, ``share_consumer`` or ``admin`` (librdkafka's ``type``;
            an admin client is a producer there, and is written so).
        name: the client's instance name (librdkafka's ``name``).
        ts_us / age_us: a monotonic clock, and the time since the client was
            made, in microseconds; time_s: the wall clock in seconds.
    """
    brokers = [_broker(b) for b in stats.brokers.values()]
    out: dict[str, Any] = {
        "name": name,
        "client_id": client_id,
        "type": "consumer" if kind in ("consumer", "share_consumer") else "producer",
        "ts": ts_us,
        "time": time_s,
        "age": age_us,
        "tx": sum(b["tx"] for b in brokers),
        "tx_bytes": sum(b["txbytes"] for b in brokers),
        "rx": sum(b["rx"] for b in brokers),
        "rx_bytes": sum(b["rxbytes"] for b in brokers),
        "brokers": {b["name"]: b for b in brokers},
    }
    if kind == "producer":
        out.update(
            msg_cnt=stats.records_buffered,
            msg_size=stats.buffer_memory_used,
            msg_size_max=stats.buffer_memory,
            txmsgs=stats.records_sent,
            txmsg_bytes=stats.bytes_sent,
            topics=_topics(stats.partitions, _produced),
        )
    elif kind == "consumer":
        out.update(
            rxmsgs=stats.records_consumed,
            rxmsg_bytes=stats.bytes_fetched,
            topics=_topics(stats.partitions, _consumed),
        )
        group = stats.group
        if group is not None:
            out["cgrp"] = {
                "state": "up" if group.generation >= 0 else "wait-coord",
                "rebalance_cnt": group.rebalances,
                "assignment_size": len(stats.partitions),
            }
    return out


def librdkafka_json(stats: Any, **kwargs: Any) -> str:
    """:func:`librdkafka_stats` as the JSON string ``stats_cb`` is given."""
    return json.dumps(librdkafka_stats(stats, **kwargs), separators=(",", ":"))
