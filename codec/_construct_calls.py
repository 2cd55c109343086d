"""construct's subclassing protocol, called from one place.

Job: the codec's own construct classes (the primitives' containers, the record
formats' ``Ref``, ``LengthPrefixed``, ``Sized``, ``Counted``) run the constructs
they wrap through construct's internal methods: ``_parsereport`` and ``_build``
on the interpreted path, ``_compileparse`` and ``_compilebuild`` when compiling.
Those names are construct's, not part of its public API, so they are named here
and nowhere else: should construct change them, this module is the one to adapt.

Rules: each function is exactly the one call it names, with construct's
arguments (``path`` is construct's location string, used only in its own error
messages). Nothing here is on a compiled hot path: the compiled code calls the
``_wire`` readers and writers directly; these run when a schema is compiled and
on the interpreted path (the reference, and the fallback that explains errors).
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

from construct import Construct

__all__ = ["build_sub", "emit_build", "emit_parse", "parse_sub"]


def parse_sub(con: Construct, stream: BytesIO, context: Any, path: str) -> Any:
    """``con`` parsed from ``stream`` inside a parent's ``context``."""
    return con._parsereport(stream, context, path)


def build_sub(con: Construct, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
    """``obj`` built by ``con`` onto ``stream`` inside a parent's ``context``."""
    return con._build(obj, stream, context, path)


def emit_parse(con: Construct, code: Any) -> str:
    """The source expression that parses ``con`` in construct's compiled code."""
    return str(con._compileparse(code))


def emit_build(con: Construct, code: Any) -> str:
    """The source expression that builds ``con`` in construct's compiled code."""
    return str(con._compilebuild(code))
