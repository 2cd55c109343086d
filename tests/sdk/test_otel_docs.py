"""docs/sdk.md's OpenTelemetry example, run as a user would run it (a fresh
interpreter, the page's code unchanged, its ``BOOTSTRAP`` a brokerlite), prints
the spans the page promises: the application's ``checkout``, the producer's
``send`` as its child, the consumer's ``poll`` linked to the record's context
and the ``process`` span (issue #82, item 5: a user following the docs sees spans).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(180)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "sdk.md"


def the_example() -> str:
    text = PAGE.read_text()
    section = text[text.index("## Tracing (OpenTelemetry)") :]
    match = re.search(r"^```python\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert match is not None
    return match.group(1)


def spans_in(output: str) -> list[dict[str, Any]]:
    """The JSON objects ConsoleSpanExporter printed, among other lines."""
    decoder = json.JSONDecoder()
    spans, at = [], 0
    while (start := output.find("{", at)) >= 0:
        try:
            obj, at = decoder.raw_decode(output, start)
        except json.JSONDecodeError:
            at = start + 1
            continue
        if isinstance(obj, dict) and "context" in obj:
            spans.append(obj)
    return spans


def test_the_docs_otel_example_prints_its_spans(brokerlite_peer: str) -> None:
    code = f"BOOTSTRAP = {brokerlite_peer!r}\n" + the_example()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    spans = {s["name"]: s for s in spans_in(done.stdout)}
    assert {"checkout", "send traced-orders", "poll traced-orders", "process traced-orders"} <= set(
        spans
    ), done.stdout[-3000:]
    checkout, send = spans["checkout"], spans["send traced-orders"]
    assert send["parent_id"] == checkout["context"]["span_id"]
    assert send["kind"] == "SpanKind.PRODUCER"
    assert send["attributes"]["messaging.destination.name"] == "traced-orders"
    # The consumer's spans point at the record's context, which the send span put in its headers.
    for name in ("poll traced-orders", "process traced-orders"):
        linked = {link["context"]["span_id"] for link in spans[name]["links"]}
        assert send["context"]["span_id"] in linked, name
    assert "processing b'order-17'" in done.stdout
