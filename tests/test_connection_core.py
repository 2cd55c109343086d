"""One connection core (issue #65): only the SDK's I/O-free connection state frames
requests, assigns correlation ids and matches answers to requests.

Its drivers (the SDK's async connection, the Spark source's blocking one,
brokerlite's inter-broker links, the proxy's upstream pool, login and bootstrap
probe) hand it bodies and bytes; a fix to framing,
correlation, the ApiVersions handshake or a deadline is then made once. This test
reads every module of every part but the codec (whose primitives the core is built
from) and looks, by AST, for what a second implementation is made of:

* a request header built with a correlation id (``RequestHeader(...,
  correlation_id=...)``), or a request framed by hand (``encode_request``,
  ``RequestFramer``);
* a frame's correlation id read to match it (``peek_correlation_id``);
* a correlation counter (a name or attribute about correlation ids, or
  ``next_id``, counted up or bound to ``itertools.count``).

The places still doing so are listed below with why, and how many they hold: a new
one fails the test, and so does a list left longer than the code.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from test_layers import PARTS, REPO

CORE = "sdk/connection_state.py"

# Where a part frames or correlates on its own, and how many such places it has.
ALLOWED: dict[str, tuple[int, str]] = {
    # Not a connection: the demo prints a producer's first requests as on the wire.
    "tools/demo.py": (3, "the wire tour frames an example stream to print, with no connection"),
    # The proxy's upstream pool, its SASL login and its bootstrap Metadata probe
    # frame and correlate through the core (#65); what is left is the server side:
    # a client's correlation id echoed or matched.
    "proxy/principals.py": (1, "the correlation id of a client's request it refuses"),
    "proxy/server.py": (
        1,
        "forwarding: its upstream side's answers matched to the client's own correlation ids",
    ),
    "proxy/filters.py": (1, "a request a filter changed, re-framed with the client's header"),
}

_COUNTER_NAME = re.compile(r"corr|next_id", re.IGNORECASE)
_FRAMING_CALLS = {"encode_request": "frames a request", "RequestFramer": "frames requests"}


def _called(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _target_names(targets: list[ast.expr]) -> list[str]:
    names = []
    for target in targets:
        if isinstance(target, ast.Name):
            names.append(target.id)
        elif isinstance(target, ast.Attribute):
            names.append(target.attr)
    return names


def findings(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each piece of a framing or correlation implementation."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            called = _called(node)
            if called == "RequestHeader" and any(k.arg == "correlation_id" for k in node.keywords):
                found.append((node.lineno, "builds a request header with a correlation id"))
            elif called == "peek_correlation_id":
                found.append((node.lineno, "reads a frame's correlation id"))
            elif called in _FRAMING_CALLS:
                found.append((node.lineno, _FRAMING_CALLS[called]))
        elif isinstance(node, ast.AugAssign):
            if any(_COUNTER_NAME.search(n) for n in _target_names([node.target])):
                found.append((node.lineno, "counts correlation ids"))
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            counted = isinstance(value, ast.BinOp) or (
                isinstance(value, ast.Call) and _called(value) == "count"
            )
            if counted and any(_COUNTER_NAME.search(n) for n in _target_names(targets)):
                found.append((node.lineno, "counts correlation ids"))
    return found


# Every finding needs one of these in the text: the rest is not parsed.
_MENTIONS = re.compile(r"corr|next_id|RequestHeader|encode_request|RequestFramer", re.IGNORECASE)


def _modules() -> list[tuple[Path, str]]:
    """The modules of every part but the codec that may hold a finding, with their text."""
    found = []
    for part in PARTS:
        if part == "codec":
            continue
        for path in sorted((REPO / part).rglob("*.py")):
            text = path.read_text()
            if _MENTIONS.search(text):
                found.append((path, text))
    return found


def test_the_detector_sees_each_pattern() -> None:
    """The patterns are found where they are (so an empty answer below means none)."""
    sample = """
import itertools
from trafka.codec import RequestFramer, peek_correlation_id
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import encode_request

class Link:
    def __init__(self):
        self._corr = itertools.count(1)
        self.next_id = 0

    def send(self, key, version, body):
        self.next_id += 1
        self._next_corr = (self.next_id + 1) & 0x7FFFFFFF
        header = RequestHeader(request_api_key=key, correlation_id=next(self._corr))
        return encode_request(header, body), RequestFramer("me")

    def match(self, frame):
        return peek_correlation_id(frame)
"""
    assert Counter(what for _, what in findings(sample)) == {
        "counts correlation ids": 3,
        "builds a request header with a correlation id": 1,
        "frames a request": 1,
        "frames requests": 1,
        "reads a frame's correlation id": 1,
    }
    # The core itself frames and matches (it is the one place that may).
    core = {what for _, what in findings((REPO / CORE).read_text())}
    assert {"frames requests", "reads a frame's correlation id", "counts correlation ids"} <= core


def test_only_the_core_frames_and_correlates_requests() -> None:
    over = []
    seen: dict[str, int] = {}
    for path, text in _modules():
        where = path.relative_to(REPO).as_posix()
        if where == CORE:
            continue
        found = findings(text)
        if not found:
            continue
        seen[where] = len(found)
        allowed = ALLOWED.get(where, (0, ""))[0]
        if len(found) > allowed:
            lines = "\n  ".join(f"{where}:{line}: {what}" for line, what in found)
            over.append(
                f"{where}: {len(found)} framing/correlation sites, {allowed} allowed; "
                f"drive trafka.sdk.connection_state.ConnectionState instead:\n  {lines}"
            )
    for where, (count, why) in ALLOWED.items():
        if seen.get(where, 0) < count:
            over.append(
                f"{where}: {seen.get(where, 0)} sites, below the {count} allowed ({why}); "
                "lower or remove its entry in ALLOWED"
            )
    assert not over, "\n".join(over)
