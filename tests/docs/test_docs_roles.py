"""The API reference's griffe extension (docs/_ext/griffe_roles.py): Sphinx roles
in docstrings become optional autorefs, resolved in the docstring's scope, and
griffe, loading trafka's packages with it, leaves no role behind."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import griffe
import pytest

ROOT = Path(__file__).resolve().parents[2]
ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj|const|type):`")


def extension() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "griffe_roles", ROOT / "docs/_ext/griffe_roles.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_roles_become_optional_autorefs() -> None:
    rewrite = extension().rewrite_roles
    known = {
        "Producer": "trafka.sdk.producer.Producer",
        "send": "trafka.sdk.producer.Producer.send",
    }
    out = rewrite(
        "See :class:`~trafka.sdk.Producer`, :meth:`send`, :func:`trafka.sdk.open_producer`, "
        ":class:`Producer`, :exc:`the error <trafka.sdk.ConfigError>` and `plain`.",
        known.get,
    )
    assert out == (
        'See <autoref identifier="trafka.sdk.Producer" optional><code>Producer</code></autoref>, '
        '<autoref identifier="trafka.sdk.producer.Producer.send" optional><code>send()</code></autoref>, '
        '<autoref identifier="trafka.sdk.open_producer" optional>'
        "<code>trafka.sdk.open_producer()</code></autoref>, "
        '<autoref identifier="trafka.sdk.producer.Producer" optional><code>Producer</code></autoref>, '
        '<autoref identifier="trafka.sdk.ConfigError" optional><code>the error</code></autoref> '
        "and `plain`."
    )
    # A relative target (Sphinx's leading dot) is resolved without the dot.
    assert 'identifier="x.y.flush"' in rewrite(":meth:`.flush`", {"flush": "x.y.flush"}.get)
    assert (
        ROLE.search(rewrite(":data:`CLIENT_VERSIONS` and :mod:`trafka.codec`", known.get)) is None
    )


@pytest.mark.parametrize("package", ["trafka.sdk", "trafka.proxy", "trafka.codec"])
def test_no_role_survives_in_a_loaded_package(package: str, tmp_path: Path) -> None:
    # griffe reads the sources laid out as installed (the folders map to
    # trafka.<folder>), as `make src-tree` lays them out for the docs.
    (tmp_path / "trafka").mkdir()
    for folder in ("codec", "common", "sdk", "proxy", "discovery"):
        (tmp_path / "trafka" / folder).symlink_to(ROOT / folder)
    loader = griffe.GriffeLoader(
        extensions=griffe.load_extensions(extension().SphinxRoles()),
        search_paths=[str(tmp_path)],
        docstring_parser=griffe.Parser.google,
    )
    root = loader.load(package)
    left = []

    def walk(obj: griffe.Object) -> None:
        if obj.docstring is not None and ROLE.search(obj.docstring.value):
            left.append(obj.path)
        for member in obj.members.values():
            if not member.is_alias:
                walk(member)

    assert isinstance(root, griffe.Object)
    walk(root)
    assert left == []
