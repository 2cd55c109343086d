"""brokerlite's request handlers: one module per API key, franz-go style.

Each module (``k03_metadata`` for Metadata, key 3) states in its docstring
which versions it serves and how, and exports ``SPEC``, a
:class:`~._base.HandlerSpec` with its key, versions, ``handle``,
``error_response`` and ``uses``, the ports (:class:`~._base.Port`) ``handle``
reaches. :data:`HANDLERS` is the registry the broker dispatches on
and advertises in ApiVersions: an API is advertised exactly when it is here.

The version ranges are Kafka 4.0's (what kafka-python infers the broker
release from), capped at what the codec knows, but for Produce v12 and
TxnOffsetCommit v5: they join a transaction implicitly (KIP-890 part 2), which
brokerlite's transactions do not do (docs/brokerlite.md).
"""

from __future__ import annotations

import importlib
import pkgutil
import re

from ._base import HandlerSpec

__all__ = ["HANDLERS", "HandlerSpec"]

# Every kNN_<name> module of this package is a handler: adding the module is
# what makes the broker serve (and advertise) the API.
_MODULES = [
    importlib.import_module(f"{__name__}.{info.name}")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name)
    if re.fullmatch(r"k\d\d_\w+", info.name)
]

HANDLERS: dict[int, HandlerSpec] = {module.SPEC.api_key: module.SPEC for module in _MODULES}
