"""The demo runs, decodes its frames and round-trips its responses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from trafka.codec import protocol
from trafka.tools import demo
from trafka.tools.cli import main
from trafka.tools.decode import decode_stream


def test_run_prints_decoded_frames() -> None:
    out: list[str] = []
    assert demo.run(out.append) == 0
    text = "\n".join(out)
    assert '"api_name": "Metadata"' in text
    assert '"api_name": "Produce"' in text
    assert '"compression": "lz4"' in text
    assert 'key customer-42  value {"item": "cups", "qty": 6}  headers [source=app]' in text
    assert text.count("round trip ok") == 2
    assert out[-1] == "demo: ok"

    # The JSON printed for each frame is exactly what `trafka decode` produces.
    start = out.index("== 2. Decoded by `trafka decode` (one JSON object per frame)") + 1
    end = next(i for i, line in enumerate(out) if line.startswith("The lz4 batch"))
    decoder = json.JSONDecoder()
    blob = "\n".join(out[start:end])
    printed, pos = [], 0
    while pos < len(blob):
        obj, pos = decoder.raw_decode(blob, pos)
        printed.append(obj)
        while pos < len(blob) and blob[pos].isspace():
            pos += 1
    assert printed == list(decode_stream(demo.build_request_stream()))


def test_request_stream_is_what_the_brief_promises() -> None:
    frames = list(decode_stream(demo.build_request_stream()))
    assert [(f["api_name"], f["api_version"]) for f in frames] == [("Metadata", 12), ("Produce", 9)]
    assert protocol.api(0).is_flexible(frames[1]["api_version"])
    (batch,) = frames[1]["body"]["topic_data"][0]["partition_data"][0]["records"]
    assert batch["compression"] == "lz4"
    assert len(batch["records"]) == len(demo.RECORDS)
    assert all(r["key"] and r["headers"] for r in batch["records"])


def test_demo_reports_a_failed_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    real = protocol.decode_response

    def lossy(frame: bytes, key: int, version: int) -> tuple[object, object]:
        head, _ = real(frame, key, version)
        return head, None

    monkeypatch.setattr(demo.protocol, "decode_response", lossy)
    out: list[str] = []
    assert demo.run(out.append) == 1
    assert out[-1] == "demo: FAILED"


def test_trafka_demo_command() -> None:
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().endswith("demo: ok")


@pytest.mark.timeout(60)
def test_python_m_demo() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "trafka.tools.demo"],
        capture_output=True,
        timeout=50,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().rstrip().endswith("demo: ok")
