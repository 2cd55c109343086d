"""Fetch session metadata (KIP-227): the ``(session_id, session_epoch)`` a Fetch
request carries, shared by the consumer (trafka.sdk) and the broker (brokerlite).

* Session id 0 means no session. Epoch 0 in a full request asks for a new
  session (closing the one named, if any); epoch -1 asks for none (and closes
  the one named).
* A session's epochs run 1, 2, ... up to the largest int32, then 1 again, as
  Kafka's ``FetchMetadata.nextEpoch``; -1 stays -1.
"""

from __future__ import annotations

__all__ = ["FINAL_EPOCH", "INITIAL_EPOCH", "INVALID_SESSION_ID", "next_epoch"]

#: The session id of a request or answer without a session.
INVALID_SESSION_ID = 0
#: The epoch of a full request that asks for a (new) session.
INITIAL_EPOCH = 0
#: The epoch of a full request that wants no session (or closes one).
FINAL_EPOCH = -1

_MAX_EPOCH = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: -1 stays -1, the largest int32 wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == _MAX_EPOCH:
        return 1
    return epoch + 1
