"""Control records: the transaction markers a coordinator writes (commit, abort).

Job: :func:`decode_control_record` reads a control batch's record key and value,
:func:`encode_control_batch` writes a one-record control batch.

Rules: a control batch has the control and transactional attribute bits set and
holds exactly one record; a key or value that does not parse is a DecodeError.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from ._batch_encode import (
    encode_batch,
)
from ._batch_format import (
    _HH,
    _HI,
    _NAME,
    Record,
)
from .errors import DecodeError, EncodeError

# -- control records ------------------------------------------------------------------------------


class ControlRecordType(enum.IntEnum):
    """The ``type`` in a control record's key."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


class ControlRecord(NamedTuple):
    """A decoded control record.

    ``type`` is a :class:`ControlRecordType` when known (a plain int otherwise);
    ``version`` is the key's version; ``coordinator_epoch`` comes from the value
    of transaction markers (ABORT/COMMIT) and is -1 for other types.
    """

    type: int
    version: int
    coordinator_epoch: int


def decode_control_record(record: Record) -> ControlRecord:
    """Read a control batch's record: key ``(int16 version, int16 type)``, and for
    transaction markers value ``(int16 version, int32 coordinator_epoch)``.

    Raises:
        DecodeError: key or marker value too short, or a negative version.
    """
    key = record.key
    if key is None or len(key) < 4:
        raise DecodeError(
            "control record key needs 4 bytes", message_name="ControlRecord", field="key"
        )
    version, kind = _HH.unpack_from(key)
    if version < 0:
        raise DecodeError(f"invalid version {version}", message_name="ControlRecord", field="key")
    try:
        kind = ControlRecordType(kind)
    except ValueError:
        pass
    epoch = -1
    if kind in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        value = record.value
        if value is None or len(value) < 6:
            raise DecodeError(
                "transaction marker value needs 6 bytes",
                message_name="ControlRecord",
                field="value",
            )
        epoch = _HI.unpack_from(value)[1]
    return ControlRecord(kind, version, epoch)


def encode_control_batch(
    marker_type: ControlRecordType | int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker batch (transactional + control, one record).

    Args:
        marker_type: ABORT (0) or COMMIT (1).
        producer_id, producer_epoch: the transaction's producer.
        coordinator_epoch: the transaction coordinator's epoch.
        timestamp: the marker's timestamp (the codec reads no clock).
        base_offset: where the marker goes in the log.
        partition_leader_epoch: the writing leader's epoch.

    Raises:
        EncodeError: a marker type other than ABORT/COMMIT or a field out of range.
    """
    if marker_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise EncodeError(f"marker type {marker_type!r} is not ABORT or COMMIT", message_name=_NAME)
    try:
        key = _HH.pack(0, marker_type)
        value = _HI.pack(0, coordinator_epoch)
    except struct.error:
        raise EncodeError(
            f"coordinator_epoch {coordinator_epoch!r} is not an int32", message_name="ControlRecord"
        ) from None
    return encode_batch(
        [(timestamp, key, value, ())],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
