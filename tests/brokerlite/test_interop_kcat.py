"""kcat (librdkafka's command-line client, a separate older librdkafka build) against brokerlite."""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any

import pytest

KCAT = shutil.which("kcat") or "/usr/bin/kcat"

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed"),
]


def kcat(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=60, check=False)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_with_each_codec_and_consume(running: Any, topic_name: str, codec: str) -> None:
    servers = running.bootstrap_servers
    lines = [b"line-%d" % i for i in range(100)]
    produced = kcat("-b", servers, "-P", "-t", topic_name, "-z", codec, stdin=b"\n".join(lines))
    assert produced.returncode == 0, produced.stderr
    consumed = kcat("-b", servers, "-C", "-t", topic_name, "-o", "beginning", "-e", "-q")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == lines


def test_metadata_offsets_and_tail(running: Any, topic_name: str) -> None:
    servers = running.bootstrap_servers
    base = int(time.time() * 1000) - 10_000
    for i in range(5):
        produced = kcat(
            "-b", servers, "-P", "-t", topic_name, "-K", ":", "-p", "0",
            stdin=b"k%d:v%d" % (i, i),
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
    listing = kcat("-b", servers, "-L", "-t", topic_name)
    assert listing.returncode == 0, listing.stderr
    text = listing.stdout.decode()
    assert f'topic "{topic_name}" with 1 partitions' in text
    assert "broker 1 at" in text and "(controller)" in text
    # -Q: offsets by timestamp; everything was produced after `base`.
    query = kcat("-b", servers, "-Q", "-t", f"{topic_name}:0:{base}")
    assert query.returncode == 0, query.stderr
    assert b"offset 0" in query.stdout
    tail = kcat("-b", servers, "-C", "-t", topic_name, "-o", "-2", "-e", "-q", "-f", "%k=%s\\n")
    assert tail.stdout.splitlines() == [b"k3=v3", b"k4=v4"]
