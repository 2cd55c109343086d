"""bench/proxy.py's report of rounds (``--rounds``): a path measured several
times is given by the medians of its rounds, and its latency added over
direct is the difference of the two medians. The report's own arithmetic, on
figures made up here (the smoke run of make bench's line runs one round)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # its own helpers (_kafka, _open_loop)
    try:
        spec = importlib.util.spec_from_file_location("bench_proxy_report", BENCH / "proxy.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


def test_open_loops_of_several_rounds_are_given_by_their_medians(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    def loop(what: str, p50_ms: float, cpu: float | None = None) -> object:
        # 100 samples: the p50 (quantile 0.5 picks the 51st) is p50_ms.
        times = [p50_ms / 1e3] * 100
        return bench.Latency("1 broker", f"{what} (open loop)", times, "one round", 2000, cpu)

    results = [loop("direct", ms) for ms in (0.9, 0.5, 0.4)]
    results += [loop("murmur2", ms, cpu) for ms, cpu in ((2.0, 0.4), (5.0, 0.5), (3.0, 0.45))]
    results.append(loop("none encrypted", 1.5, 0.4))  # one round: its own note
    bench.print_open_loop(results)
    lines = {
        line.split("(open loop)")[0].split(None, 2)[-1].strip(): line
        for line in capsys.readouterr().out.splitlines()
        if "(open loop)" in line
    }
    assert "median of 3 rounds, p50 0.40-0.90 ms" in lines["direct"]
    # After the path: p50, p99, added p50, added p99, then the note.
    routed = lines["murmur2"].split("(open loop)")[1].split()
    # p50 median 3.00 ms; added: 3.00 - 0.50 (direct's median)
    assert routed[:3] == ["3.00", "3.00", "+2.50"], lines["murmur2"]
    assert "p50 2.00-5.00 ms; proxy CPU 0.45 ms per request" in lines["murmur2"]
    encrypted = lines["none encrypted"]
    assert encrypted.split("(open loop)")[1].split()[2] == "+1.00" and "one round" in encrypted


def test_cpu_per_mb_of_several_rounds_is_their_median(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(path: str, produce_s: float) -> object:
        # 100,000 records of 100 bytes: 10 MB, so 1 s of proxy CPU is 100 ms per MB/s.
        return bench.Run(
            "1 broker", path, "plain", 100_000, 1.0, 1.0, (produce_s, 0, 0), (0.03, 0, 0), "ok"
        )

    bench.print_cpu_per_mb(
        [run("murmur2", s) for s in (0.2, 0.07, 0.09)] + [run("route none", 0.05)]
    )
    out = capsys.readouterr().out
    [routed] = [line for line in out.splitlines() if "murmur2" in line]
    assert "9.0 ms (3.0) per MB/s" in routed and "median of 3 rounds (7.0-20.0)" in routed, routed
    [forwarded] = [line for line in out.splitlines() if "route none" in line]
    assert "5.0 ms (3.0) per MB/s" in forwarded and "rounds" not in forwarded
