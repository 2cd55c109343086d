"""Which change notifications to delete, as Kafka's ``ZkNodeChangeNotificationListener`` does.

Kafka's brokers announce a change of ACLs (``/kafka-acl-changes``,
``/kafka-acl-extended-changes``), of entity configs (``/config/changes``) and of
delegation tokens (``/delegation_token/token_changes``) with sequential znodes.
Every broker that has processed the notifications deletes those created more
than 15 minutes before (judged by the znode's ctime, ZooKeeper's creation
time, against the broker's clock), so the notifications do not accumulate;
a broker that joins later reads the state itself, not the notifications.

Rules: stateless and I/O-free; the driver lists the notifications with their
ctimes and deletes what :func:`obsolete_notifications` names.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["CHANGE_EXPIRATION_MS", "obsolete_notifications"]

#: Kafka's ``changeExpirationMs`` (15 minutes).
CHANGE_EXPIRATION_MS = 15 * 60 * 1000


def obsolete_notifications(
    ctimes: Mapping[str, int], now_ms: int, expiration_ms: int = CHANGE_EXPIRATION_MS
) -> list[str]:
    """The notifications (child name -> ctime in ms) to delete at ``now_ms``: those
    whose ctime is more than ``expiration_ms`` before it, oldest first."""
    return sorted(name for name, ctime in ctimes.items() if ctime + expiration_ms < now_ms)
