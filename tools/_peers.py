"""The demo's optional peers: what it uses only where it is installed.

``pip install trafka`` brings none of them (confluent-kafka, kafka-python and its
lz4 codec, PySpark and Java, the console's web stack), so a step that needs one
is skipped, and says so in one line starting with ``skipped:`` that names the
step, what is missing and how to install it. The demo still checks everything
else and exits 0 when that holds.
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Callable

__all__ = ["java_missing", "kafka_python_missing", "module_missing", "skip"]


def skip(say: Callable[[str], None], step: str, why: str) -> None:
    """Say, in one line, that ``step`` is skipped and why."""
    say(f"skipped: {step} ({why})")


def module_missing(module: str, install: str) -> str | None:
    """Why ``module`` cannot be used here (``install`` says how to get it), or None."""
    try:
        importlib.import_module(module)
    except ImportError:
        return f"{module} is not installed: {install}"
    return None


def kafka_python_missing() -> str | None:
    """Why kafka-python cannot read the demo's lz4 batches here, or None.

    kafka-python decompresses lz4 with the ``lz4`` package, which it does not
    depend on: without it, reading an lz4 batch raises UnsupportedCodecError.
    """
    try:
        from kafka.codec import has_lz4
    except ImportError:
        return "kafka-python is not installed: pip install kafka-python"
    if not has_lz4():
        return "kafka-python reads lz4 batches only with the lz4 package: pip install lz4"
    return None


def java_missing() -> str | None:
    """Why Spark cannot start here (no Java runtime), or None."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Spark needs a Java runtime: apt-get install default-jre-headless"
    return None
