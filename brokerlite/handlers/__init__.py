"""brokerlite's request handlers: one module per API key, franz-go style.

Each module (``k03_metadata`` for Metadata, key 3) states in its docstring
which versions it serves and how, and exports ``SPEC``, a
:class:`~._base.HandlerSpec` with its key, versions, ``handle``,
``error_response`` and ``uses``, the ports (:class:`~._base.Port`) ``handle``
reaches. :data:`HANDLERS` is the registry the broker dispatches on
and advertises in ApiVersions: an API is advertised exactly when it is here.

The version ranges are Kafka 4.0's (what kafka-python infers the broker
release from), capped at what the codec knows (Produce v12 and TxnOffsetCommit
v5 join a transaction implicitly, KIP-890 part 2: docs/brokerlite.md's
"Transaction version 2").

A handler's module is imported on the first use of its key (issue #60: importing
all of them was most of a broker process's start-up). Until then
:data:`HANDLERS` knows its key, module and versions from ``_index.py``, which
is generated from the modules' ``SPEC`` (the truth) by
``python -m trafka.tools.handler_index``; ``tests/brokerlite/test_handler_index.py``
fails when it is stale.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping

from ._base import HandlerSpec, Versions
from ._index import INDEX

__all__ = ["HANDLERS", "HandlerSpec", "Handlers"]


class Handlers(MutableMapping[int, HandlerSpec]):
    """api key -> :class:`HandlerSpec`, importing a handler's module when its
    key is first looked up; :meth:`versions` answers from the index without it.

    Setting or deleting a key (tests do, through ``monkeypatch``) changes what
    the broker serves and advertises, as with a plain dict.
    """

    def __init__(self, index: Mapping[int, tuple[str, Versions]]) -> None:
        self._index = dict(index)
        self._specs: dict[int, HandlerSpec] = {}

    def get(self, key: int, default: HandlerSpec | None = None) -> HandlerSpec | None:  # type: ignore[override]
        spec = self._specs.get(key)
        if spec is not None:
            return spec
        return self[key] if key in self._index else default

    def __getitem__(self, key: int) -> HandlerSpec:
        spec = self._specs.get(key)
        if spec is None:
            module, _ = self._index[key]
            spec = self._specs[key] = importlib.import_module(f"{__name__}.{module}").SPEC
        return spec

    def __setitem__(self, key: int, spec: HandlerSpec) -> None:
        self._specs[key] = spec
        self._index[key] = (spec.handle.__module__.rsplit(".", 1)[-1], spec.versions)

    def __delitem__(self, key: int) -> None:
        del self._index[key]
        self._specs.pop(key, None)

    def __iter__(self) -> Iterator[int]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def versions(self, key: int) -> Versions:
        """The versions of ``key``'s handler, without importing it."""
        return self._index[key][1]

    def imported(self) -> frozenset[int]:
        """The keys whose handler has been looked up (imported)."""
        return frozenset(self._specs)


HANDLERS = Handlers(INDEX)
