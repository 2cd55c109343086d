"""Import-time benchmark: trafka's entry points against aiokafka and confluent-kafka.

Issue #48's goals, each measured here in the same run as its peers:

* ``import trafka.sdk`` at most 2x ``import aiokafka``;
* ``import trafka.sdk.blocking`` at most 2.5x ``import aiokafka``;
* ``trafka --help`` (the whole command, interpreter start-up included) under 150 ms.

With pyspark installed, one more figure, without a goal: what the data source
costs each Python worker Spark starts for a task. The worker unpickles the
task's reader or writer, which imports ``trafka.spark.source`` (and the package
before it); the case times that import in an interpreter that has already
loaded what the worker itself has (PySpark's worker module, pyarrow, PySpark's
data source API), so only trafka's part is counted.

Each import runs in a fresh interpreter, which times the ``import`` statement
alone (``time.perf_counter`` around it), so the interpreter's own start-up,
the same for every library, is not counted. The command line is timed as a
whole process from outside, since start-up is part of what its user waits for.
The cases run in rounds, one of each per round, so a busy moment of the
machine falls on all of them alike; the figure reported is the best round (the
least disturbed), with the median in brackets. Each is measured twice: as wall
time, what the goals speak of, and as CPU time (the process's user and system
time), which a machine shared with other work disturbs much less: when the two
disagree, the wall figures waited for the CPU.

Installed packages come with compiled bytecode (pip compiles on install), so
the children run without ``PYTHONDONTWRITEBYTECODE`` and after one warm-up run
of each case, which writes whatever bytecode is missing; otherwise trafka's
figures would include compiling its sources on every run.

``--top N`` also lists, for each trafka import, the N modules with the largest
own import time under ``python -X importtime`` (each module's best round):
where the time goes.

This is a measurement, not a test: nothing here fails on a slow result. It
exits non-zero only when a case could not be measured (an import failed).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

PEERS = ("aiokafka", "confluent_kafka")
TRAFKA = ("trafka.sdk", "trafka.sdk.blocking")
# (case, reference, goal): trafka's import at most ``goal`` times the reference's.
RATIO_GOALS = (("trafka.sdk", "aiokafka", 2.0), ("trafka.sdk.blocking", "aiokafka", 2.5))
CLI_CASE = "trafka --help"
CLI_GOAL_MS = 150.0
# The data source's executor-side entry point, and what a Spark Python worker has
# imported before it (not timed).
SPARK_WORKER = "trafka.spark.source"
PRELUDES = {SPARK_WORKER: "import pyspark.worker, pyarrow, pyspark.sql.datasource"}

# The child: the import's own wall and CPU time, in seconds, on stdout.
TIMED_IMPORT = (
    "{prelude}; import time; w, c = time.perf_counter(), time.process_time(); "
    "import {module}; print(time.perf_counter() - w, time.process_time() - c)"
)


@dataclass(frozen=True)
class Result:
    wall: float  # seconds, best round
    wall_median: float
    cpu: float
    cpu_median: float


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def cli_command() -> list[str]:
    """The installed ``trafka`` script when there is one (what a user runs), else
    the same entry point through ``-c``."""
    script = Path(sys.executable).parent / "trafka"
    if script.exists():
        return [sys.executable, str(script), "--help"]
    return [
        sys.executable,
        "-c",
        "import sys; from trafka.tools.cli import main; sys.exit(main())",
        "--help",
    ]


def run_import(module: str, env: dict[str, str]) -> tuple[float, float]:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            TIMED_IMPORT.format(module=module, prelude=PRELUDES.get(module, "pass")),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"import {module} failed:\n{done.stderr[-2000:]}")
    wall, cpu = done.stdout.split()[-2:]
    return float(wall), float(cpu)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_cli(env: dict[str, str]) -> tuple[float, float]:
    cpu = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(cli_command(), env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{CLI_CASE} failed:\n{done.stderr[-2000:]}")
    return elapsed, _children_cpu() - cpu


def measure(cases: list[str], rounds: int, env: dict[str, str]) -> dict[str, Result]:
    def once(case: str) -> tuple[float, float]:
        return run_cli(env) if case == CLI_CASE else run_import(case, env)

    for case in cases:
        once(case)  # warm-up: writes missing bytecode
    runs: dict[str, list[tuple[float, float]]] = {case: [] for case in cases}
    for _ in range(rounds):
        for case in cases:
            runs[case].append(once(case))
    results = {}
    for case, pairs in runs.items():
        walls, cpus = [w for w, _ in pairs], [c for _, c in pairs]
        results[case] = Result(
            min(walls), statistics.median(walls), min(cpus), statistics.median(cpus)
        )
    return results


def top_imports(
    module: str, n: int, rounds: int, env: dict[str, str]
) -> list[tuple[int, int, str]]:
    """The ``n`` modules with the largest own time (us) under ``-X importtime``,
    each module's best of ``rounds`` runs: (own, cumulative, name), largest first."""
    best: dict[str, tuple[int, int]] = {}
    for _ in range(rounds):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        for line in done.stderr.splitlines():
            if not line.startswith("import time:") or "|" not in line:
                continue
            own, cumulative, name = (
                part.strip() for part in line[len("import time:") :].split("|")
            )
            if own.isdigit():
                row = (int(own), int(cumulative))
                best[name] = min(best.get(name, row), row)
    rows = [(own, cumulative, name) for name, (own, cumulative) in best.items()]
    return sorted(rows, reverse=True)[:n]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs of each case (best reported)")
    parser.add_argument(
        "--top", type=int, default=0, help="list the N slowest modules of each trafka import"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a check that the benchmark runs, not a measurement: one round, whatever "
        "--rounds says (tests/bench/test_bench_smoke.py)",
    )
    args = parser.parse_args(argv)
    rounds = 1 if args.smoke else max(1, args.rounds)
    env = child_env()
    peers = [p for p in PEERS if find_spec(p) is not None]
    missing = [p for p in PEERS if p not in peers]
    spark = find_spec("pyspark") is not None
    cases = [*peers, *TRAFKA, CLI_CASE, *([SPARK_WORKER] if spark else [])]
    results = measure(cases, rounds, env)

    print(
        f"import time in fresh interpreters, Python {platform.python_version()}, {platform.machine()}"
    )
    print(f"best of {rounds} rounds, and the median; imports: the import statement alone")
    if missing:
        print(f"not installed, not measured: {', '.join(missing)}")
    print()
    print(f"{'':<36} {'wall':>10} {'(median)':>10} {'cpu':>10} {'(median)':>10}")
    for case in cases:
        r = results[case]
        label = f"{case} (whole command)" if case == CLI_CASE else f"import {case}"
        if case in PRELUDES:
            label += " (worker)"
        print(f"{label:<36} {_ms(r.wall)} {_ms(r.wall_median)} {_ms(r.cpu)} {_ms(r.cpu_median)}")
    print()
    print("ratios (best / best), measured in this run:")
    for case, reference, goal in RATIO_GOALS:
        for peer in peers:
            wall = results[case].wall / results[peer].wall
            cpu = results[case].cpu / results[peer].cpu
            note = f"   goal <= {goal:g}x" if peer == reference else ""
            print(f"  {f'{case} / {peer}':<38} wall {wall:5.2f}x   cpu {cpu:5.2f}x{note}")
    cli = results[CLI_CASE]
    print(
        f"  {CLI_CASE}: wall {cli.wall * 1000:.0f} ms   cpu {cli.cpu * 1000:.0f} ms"
        f"   goal < {CLI_GOAL_MS:.0f} ms"
    )
    if spark:
        worker = results[SPARK_WORKER]
        print(
            f"  a Spark task's Python worker, for {SPARK_WORKER}: wall {worker.wall * 1000:.0f} ms"
            f"   cpu {worker.cpu * 1000:.0f} ms   (after pyspark's own imports)"
        )
    else:
        print(f"  pyspark not installed: {SPARK_WORKER} in a Spark worker not measured")

    if args.top > 0:
        for module in TRAFKA:
            print()
            print(
                f"python -X importtime -c 'import {module}': the {args.top} slowest modules (own time)"
            )
            for own, cumulative, name in top_imports(module, args.top, rounds, env):
                print(
                    f"  {own / 1000:7.1f} ms  (with its imports {cumulative / 1000:7.1f} ms)  {name}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
