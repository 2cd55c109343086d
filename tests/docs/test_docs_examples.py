"""Every ```python block in docs/*.md runs.

Blocks of one page run in order in one namespace, so a page reads like a
session. A block preceded by a ``<!-- no-test -->`` line is skipped.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
SKIP_MARK = "<!-- no-test -->"


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, source) of each python block not marked no-test."""
    blocks = []
    for match in FENCE.finditer(text):
        if match.group(1) != "python":
            continue
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if before.strip() == SKIP_MARK:
            continue
        blocks.append((text.count("\n", 0, match.start()) + 2, match.group(2)))
    return blocks


PAGES = sorted(DOCS.glob("*.md"))


def test_docs_exist() -> None:
    names = {p.name for p in PAGES}
    assert {"index.md", "codec.md", "cli.md", "design.md"} <= names
    assert python_blocks((DOCS / "codec.md").read_text()), "codec.md must have examples"


def test_block_extraction() -> None:
    text = "x\n```python\na = 1\n```\n<!-- no-test -->\n```python\nb = 2\n```\n```sh\nls\n```\n"
    assert python_blocks(text) == [(3, "a = 1\n")]


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_examples_run(page: Path) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for line, source in python_blocks(page.read_text()):
        # Pad with blank lines so that tracebacks give the page's own line numbers.
        code = compile("\n" * (line - 1) + source, str(page), "exec")
        # Examples print to show results; keep the test output quiet.
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                exec(code, namespace)
            except Exception as exc:
                raise AssertionError(
                    f"the example at {page.name} line {line} failed: {exc!r}"
                ) from exc


def test_sdk_librdkafka_table_names_every_alias_and_every_refused_name() -> None:
    """docs/migrating-from-confluent-kafka.md's librdkafka section lists each other-client alias of a setting
    and each name trafka refuses (sdk/config/keys.py's ``_NOT_TAKEN``)."""
    import dataclasses

    from trafka.sdk.config import (
        AdminConfig,
        ConsumerConfig,
        ProducerConfig,
        ShareConsumerConfig,
    )
    from trafka.sdk.config.keys import _NOT_TAKEN

    text = (DOCS / "migrating-from-confluent-kafka.md").read_text()
    start = text.index("## librdkafka's settings")
    section = text[start:]
    named = set(re.findall(r"`([\w.]+)`", section))
    aliases = {
        alias
        for cls in (ProducerConfig, ConsumerConfig, ShareConsumerConfig, AdminConfig)
        for f in dataclasses.fields(cls)
        for alias in f.metadata.get("aliases", ())
        if "." in alias  # kafka-python's snake names belong to its own table
    }
    assert aliases - named == set()
    assert set(_NOT_TAKEN) - named == set()
