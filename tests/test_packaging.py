"""Packaging: every package folder is declared in pyproject.toml, and a wheel builds.

The repository's top-level folders are the packages (``codec/`` is
``trafka.codec``) through setuptools' ``package-dir``; a folder with an
``__init__.py`` that is missing from ``[tool.setuptools] packages`` would work
in the editable install and silently vanish from the wheel.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
PACKAGES: list[str] = SETUPTOOLS["packages"]
PACKAGE_DIR: dict[str, str] = SETUPTOOLS["package-dir"]

# Folders that hold no installable code.
NOT_PACKAGES = {"tests", "docs", "bench", "site", "build", "dist", "run", "trafka-data"}


def package_folders() -> list[Path]:
    """Every folder (at the top level and below) that has an __init__.py."""
    found = []
    for init in REPO.rglob("__init__.py"):
        rel = init.parent.relative_to(REPO)
        top = rel.parts[0]
        if top.startswith(".") or top in NOT_PACKAGES or top.endswith(".egg-info"):
            continue
        if "__pycache__" in rel.parts:
            continue
        found.append(rel)
    return sorted(found)


def test_every_package_folder_is_declared() -> None:
    folders = package_folders()
    assert Path("codec") in folders and Path("codec/messages") in folders
    by_dir = {folder: name for name, folder in PACKAGE_DIR.items()}
    for folder in folders:
        expected = "trafka." + ".".join(folder.parts)
        assert folder.as_posix() in by_dir, (
            f"{folder}/ is missing from [tool.setuptools.package-dir]"
        )
        assert by_dir[folder.as_posix()] == expected
        assert expected in PACKAGES, f"{expected} is missing from [tool.setuptools] packages"


def test_declarations_are_consistent() -> None:
    assert len(PACKAGES) == len(set(PACKAGES))
    assert set(PACKAGES) == set(PACKAGE_DIR)
    for name, folder in PACKAGE_DIR.items():
        assert (REPO / folder / "__init__.py").is_file(), f"{name} -> {folder}/ has no __init__.py"
        assert name == "trafka." + folder.replace("/", ".")


@pytest.mark.parametrize("name", PACKAGES)
def test_declared_package_imports(name: str) -> None:
    module = importlib.import_module(name)
    assert Path(module.__file__ or "").resolve().parent == (REPO / PACKAGE_DIR[name]).resolve()


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_install_lines_name_every_extra(page: str) -> None:
    """A user reads which extras there are where the page says how to install
    (its first ``sh`` block naming ``pip install``), not in pyproject.toml."""
    extras = set(PYPROJECT["project"]["optional-dependencies"]) - {"dev"}
    text = (REPO / page).read_text()
    block = next(b for b in text.split("```sh")[1:] if "pip install" in b.split("```")[0])
    named = set(re.findall(r"trafka\[([a-z-]+)\]", block.split("```")[0]))
    assert named == extras, f"{page}'s install lines name {sorted(named)}, not {sorted(extras)}"


def _copy_sources(dest: Path) -> Path:
    """The files a build needs, without the venv, caches or build leftovers."""
    src = dest / "src"
    ignore = shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", "site", ".*cache*"
    )
    src.mkdir()
    for item in [
        "pyproject.toml",
        "README.md",
        *sorted({p.split("/")[0] for p in PACKAGE_DIR.values()}),
    ]:
        path = REPO / item
        if path.is_dir():
            shutil.copytree(path, src / item, ignore=ignore)
        else:
            shutil.copy2(path, src / item)
    return src


@pytest.mark.slow
@pytest.mark.timeout(170)
def test_wheel_contains_the_generated_modules(tmp_path: Path) -> None:
    # Built from a copy, so the build leaves nothing behind in the working tree.
    src = _copy_sources(tmp_path)
    out = tmp_path / "wheels"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--disable-pip-version-check",
            "--wheel-dir",
            str(out),
            str(src),  # an absolute path: pip must not read it as a project name
        ],
        capture_output=True,
        text=True,
        timeout=160,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = out.glob("trafka-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "trafka/codec/messages/k00_produce.py" in names
    assert "trafka/codec/py.typed" in names
    assert "trafka/sdk/py.typed" in names  # services type-check against the SDK
    for name in PACKAGES:
        assert f"{name.replace('.', '/')}/__init__.py" in names, name
    assert not any(n.startswith(("tests/", "codec/")) for n in names)
    # The codec is generated from Kafka's specs: its LICENSE and NOTICE go along.
    licenses = {n.split(".dist-info/licenses/", 1)[1] for n in names if ".dist-info/licenses/" in n}
    assert {"codec/specs/kafka-protocol/LICENSE", "codec/specs/kafka-protocol/NOTICE"} <= licenses
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "License-Expression: Apache-2.0" in zipfile.ZipFile(wheel).read(metadata).decode()

    # Installed (not editable), the wheel must import on its own. The subprocess
    # runs without `site`, so the editable install's finder cannot stand in for
    # it; the dependencies come from this venv's site-packages, placed after it.
    target = tmp_path / "installed"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(target)
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    probe = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "import trafka.codec, trafka.codec.protocol as p; "
            "print(trafka.codec.__file__); print(len(p.all_apis()))",
        ],
        env={"PYTHONPATH": f"{target}{os.pathsep}{site_packages}", "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    location, count = probe.stdout.split()
    assert Path(location).is_relative_to(target)
    assert int(count) >= 70


# -- a clone needs nothing beside it -------------------------------------------------------------

# How a path out of the repository to the developers' shared folder is written
# (split so that this file does not match itself).
_OUTSIDE = re.compile(
    r"\.\./"
    + r"shared|parents\[\d\]\s*/\s*\""
    + r"shared\"|\""
    + r"shared\"\s*/\s*\"kafka-protocol"
)


def test_nothing_reads_past_the_repository() -> None:
    """Codegen, tests, docs and tools read Kafka's specs from codec/specs/, never from a
    folder beside the clone: a user's clone has only the project (issue #45)."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    offenders = []
    for name in filter(None, tracked):
        path = REPO / name.decode()
        if not path.is_file() or path.suffix not in {".py", ".md", ".toml", ".yml", ".cfg", ""}:
            continue
        text = path.read_text(errors="replace")
        offenders += [f"{name.decode()}: {m.group(0)}" for m in _OUTSIDE.finditer(text)]
    assert not offenders, offenders


def test_the_specs_codegen_reads_are_in_the_repository() -> None:
    from trafka.tools import codegen

    for folder in (codegen.DEFAULT_SPECS, codegen.DEFAULT_OLD_SPECS):
        assert REPO in folder.resolve().parents
        assert any((folder / "message").glob("*Request.json"))
        # Apache-2.0: Kafka's LICENSE and NOTICE travel with the files taken from it.
        assert (folder / "LICENSE").is_file() and (folder / "NOTICE").is_file()
    assert (codegen.DEFAULT_SPECS / "errors.json").is_file()
