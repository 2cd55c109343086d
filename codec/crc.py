"""The two checksums of Kafka's record formats.

* Record batches (magic 2) carry a CRC-32C (Castagnoli) of everything from the
  ``attributes`` field to the end of the batch. It is computed by the native
  ``crc32c`` package, which uses the CPU's CRC instructions where present: a
  batch is checksummed once on the way in and once on the way out, so this is
  on the hot path of every produce and fetch.
* Legacy messages (magic 0 and 1) carry a plain CRC-32 (the zlib polynomial) of
  everything from the ``magic`` byte to the end of the message.

Both functions return the checksum as an unsigned 32-bit integer, the way the
record formats store it.

The ``crc32c`` package is loaded without running its ``__init__``
(:func:`_load_crc32c`): that reads the package's own version through
``importlib.metadata``, which took longer to import than the rest of the codec
(issue #48).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import zlib
from collections.abc import Callable
from typing import Any

__all__ = ["BytesLike", "crc32", "crc32c", "crc32c_function"]

BytesLike = bytes | bytearray | memoryview

# The extension module of the ``crc32c`` package that holds the function.
_EXTENSION = "_crc32c"


def _load_crc32c() -> Callable[[Any, int], int]:
    """The ``crc32c`` package's C function.

    The function is in the package's extension module, which needs nothing
    else of the package, so it is loaded from the package's folder on its own.
    The package itself is used when it is imported already, or when its folder
    has no such extension (another layout: the ordinary import is then the
    safe way, slow or not).
    """
    package: Any = sys.modules.get("crc32c")
    if package is None:
        spec = importlib.machinery.PathFinder.find_spec("crc32c")
        for folder in (spec and spec.submodule_search_locations) or ():
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = os.path.join(folder, _EXTENSION + suffix)
                if os.path.isfile(path):
                    name = f"crc32c.{_EXTENSION}"
                    loader = importlib.machinery.ExtensionFileLoader(name, path)
                    module: Any = loader.create_module(
                        importlib.machinery.ModuleSpec(name, loader, origin=path)
                    )
                    loader.exec_module(module)
                    function: Callable[[Any, int], int] = module.crc32c
                    return function
        import crc32c as package
    function = package.crc32c
    return function


#: The C implementation itself, ``(data, value) -> int``: for C loops that call it
#: back (no Python frame per call), where :func:`crc32c` would add one.
crc32c_function = _load_crc32c()


def crc32c(data: BytesLike, value: int = 0) -> int:
    """CRC-32C of ``data``.

    Args:
        data: the bytes to checksum (any contiguous buffer; not copied).
        value: a previous result, to continue a checksum over several pieces.

    Returns:
        The checksum, 0 <= crc < 2**32.
    """
    return crc32c_function(data, value)


def crc32(data: BytesLike, value: int = 0) -> int:
    """CRC-32 (zlib polynomial) of ``data``, as legacy messages use.

    Args:
        data: the bytes to checksum (any contiguous buffer; not copied).
        value: a previous result, to continue a checksum over several pieces.

    Returns:
        The checksum, 0 <= crc < 2**32.
    """
    return zlib.crc32(data, value)
