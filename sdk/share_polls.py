"""What a share consumer's polls hand to the application, without I/O.

:class:`PollRecords` takes records from the
:class:`~trafka.sdk.share_fetcher.ShareFetcher`, deserializes them, and keeps
the records of the last poll that the application has not iterated yet (an
``async for`` that stopped part way, or the blocking consumer's records not
handed on).

Rules:

* At most ``max.poll.records`` records per poll.
* A record that cannot be deserialized is released at once (it may be
  delivered again) and the records after it are given back to the fetcher;
  the records before it are returned first, and its error is raised by the
  next poll (:attr:`PollRecords.error_next`), or at once when it came first.
* A record whose schema (:mod:`trafka.sdk.schemas`) is not loaded yet goes back
  to the fetcher with the records after it; the consumer runs
  :attr:`PollRecords.schema_loads` off its loop and polls again.
* Records not iterated yet count as not seen: implicit acknowledgement accepts
  only the others (:meth:`PollRecords.accept_seen`), and closing releases them.
"""

from __future__ import annotations

from collections import deque

from ._util import SchemaLoads, get_deserializer
from .config import ShareConsumerConfig
from .consumer_types import TopicPartition
from .errors import SerializationError
from .share_fetcher import AcknowledgeType, ShareFetcher, ShareRecord

__all__ = ["PollRecords"]


class PollRecords:
    """The records a share consumer's polls hand out (see the module doc).

    Args:
        config: the share consumer's settings (deserializers, ``max.poll.records``).

    Attributes:
        not_iterated: the records of the last poll not iterated yet, in order.
        error_next: a deserialization error for the next poll to raise, or None.
    """

    def __init__(self, config: ShareConsumerConfig) -> None:
        self._key_de = get_deserializer(config.key_deserializer)
        self._value_de = get_deserializer(config.value_deserializer)
        # Deserializers told the record's topic, partition, offset and headers
        # (trafka.sdk.schemas: header framing needs them, and errors name them).
        self._key_rec = getattr(config.key_deserializer, "deserialize_record", None)
        self._value_rec = getattr(config.value_deserializer, "deserialize_record", None)
        # Records whose schema is not loaded go back to the fetcher until the
        # consumer has run the loads off its loop.
        self.schema_loads = SchemaLoads(config.key_deserializer, config.value_deserializer)
        self._max = config.max_poll_records
        self.not_iterated: deque[ShareRecord] = deque()
        self.error_next: BaseException | None = None

    def take_not_iterated(self) -> list[ShareRecord]:
        """The records of the last poll not iterated yet, which are then handed out."""
        out = list(self.not_iterated)
        self.not_iterated.clear()
        return out

    def not_seen(self) -> set[tuple[TopicPartition, int]]:
        """``(partition, offset)`` of the records not iterated yet."""
        return {(TopicPartition(r.topic, r.partition), r.offset) for r in self.not_iterated}

    def accept_seen(self, fetcher: ShareFetcher) -> None:
        """Accept every record handed out but the ones not iterated yet (implicit mode)."""
        fetcher.acknowledge_all(AcknowledgeType.ACCEPT, skip=self.not_seen())

    def hand_out(self, fetcher: ShareFetcher) -> list[ShareRecord]:
        """The next records of ``fetcher``, deserialized (see the rules).

        Raises:
            SerializationError: the first record could not be deserialized (it was released).
        """
        raw = fetcher.take(self._max)
        kd, vd, kr, vr = self._key_de, self._value_de, self._key_rec, self._value_rec
        if kd is None and vd is None:
            return raw
        out: list[ShareRecord] = []
        loads = self.schema_loads
        for i, r in enumerate(raw):
            if loads and loads.need(r.topic, r.partition, r.offset, r.key, r.value, r.headers):
                fetcher.give_back(raw[i:])
                return out
            try:
                if kr is not None:
                    key = kr(r.key, r.topic, r.partition, r.offset, r.headers, True)
                else:
                    key = r.key if kd is None else kd(r.key)
                if vr is not None:
                    value = vr(r.value, r.topic, r.partition, r.offset, r.headers, False)
                else:
                    value = r.value if vd is None else vd(r.value)
            except Exception as exc:
                fetcher.give_back(raw[i + 1 :])
                tp = TopicPartition(r.topic, r.partition)
                fetcher.acknowledge(tp, r.offset, AcknowledgeType.RELEASE)
                fetcher.take_acknowledged()
                error = SerializationError(
                    f"{r.topic}-{r.partition} offset {r.offset} cannot be deserialized "
                    f"(it was released): {exc}"
                )
                error.__cause__ = exc
                if not out:
                    raise error from exc
                self.error_next = error
                return out
            out.append(r._replace(key=key, value=value))
        return out
