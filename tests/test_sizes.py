"""Sizes a newcomer can read (#47 step 4): no hand-written module over 1,000
lines, no class over 600 and no function over 100.

A class is measured together with the project classes it inherits from (#65):
a stack of mixins sharing ``self`` is one object to read, however many files
hold it. The bases are found in the AST (a base named in the class's module,
imported from another module of the package, or reached as ``module.Name``),
each counted once however often it recurs in the hierarchy.

The generated codec (``codec/messages``, ``codec/_error_codes.py``) is not
hand-written and is not counted; tests and benchmarks are not parts of the
package. What is still over a limit is listed in :data:`OVER` with its size
today, a ratchet: a listed item may shrink (then its entry must be lowered or
removed, or the test fails), never grow, and nothing new may join it.
``python tests/test_sizes.py`` prints the sizes found.
"""

from __future__ import annotations

import ast
import functools
import tomllib
from pathlib import Path

import source_trees

REPO = Path(__file__).resolve().parents[1]
PACKAGE_DIR: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"][
    "setuptools"
]["package-dir"]
PARTS = sorted({folder.split("/")[0] for folder in PACKAGE_DIR.values()})
GENERATED = ("codec/messages/", "codec/_error_codes.py")
LIMITS = {"module": 1000, "class": 600, "function": 100}

#: What is over its limit today: "kind path[:qualified name]" -> lines.
OVER: dict[str, int] = {}

_ONE_STATE = "one state: "
_ONE_INTERFACE = "one interface: "
_TO_SPLIT = "#65, to split: "
#: The classes over the class limit only with their mixins, with their size
#: today (a ratchet, as OVER) and why they may be. A reason starts with
#: ``_ONE_STATE`` where the concerns truly share one state, with
#: ``_ONE_INTERFACE`` where the class is a public interface whose parts add
#: methods and no state (the class's docstring says which, a test checks), or
#: with ``_TO_SPLIT`` where the stack should become objects with explicit
#: interfaces (issue #65, work left).
STACKS: dict[str, tuple[int, str]] = {
    "class sdk/admin/client.py:Admin": (
        1998,
        _ONE_INTERFACE + "Kafka's Admin, one object of some hundred calls; each capability "
        "class adds calls and no state over AdminCore (connections, routing, retries), so "
        "collaborators would only repeat every signature and docstring in a forwarding facade",
    ),
    "class brokerlite/groups/coordinator.py:GroupCoordinator": (
        1580,
        _ONE_STATE + "the classic rebalance, its requests, the offsets and the admin calls "
        "change the live groups, their timers and parked answers within one call",
    ),
    "class brokerlite/groups/classic.py:ClassicRequests": (
        763,
        _ONE_STATE + "a part of GroupCoordinator's",
    ),
    "class brokerlite/groups/offset_requests.py:OffsetRequests": (
        721,
        _ONE_STATE + "a part of GroupCoordinator's",
    ),
    "class brokerlite/transactions/coordinator.py:TransactionCoordinator": (
        1084,
        _ONE_STATE + "decisions, transitions, completions, expiry and describe change the "
        "transactional ids' records and timers within one call",
    ),
    "class brokerlite/storage/partition/__init__.py:PartitionLog": (
        1260,
        _ONE_STATE + "appends, reads, truncation, compaction, retention and the leader "
        "epochs all move one partition's segments and offsets (PartitionState)",
    ),
    "class brokerlite/storage/partition/append.py:Appends": (
        670,
        _ONE_STATE + "PartitionLog's, appending (truncating on a diverging epoch)",
    ),
    "class brokerlite/storage/partition/compaction.py:Compaction": (
        614,
        _ONE_STATE + "PartitionLog's, rewriting its segments",
    ),
    "class sdk/transactions.py:TransactionManager": (
        957,
        _ONE_STATE + "the requests move the producer id, epoch and transaction state "
        "that TxnStateMachine guards",
    ),
    "class sdk/consumer_membership.py:ConsumerMembership": (
        937,
        _ONE_STATE + "KIP-848's member is the classic Membership's state machine, "
        "specialised (a subclass, not a mixin)",
    ),
    "class sdk/accumulator.py:Accumulator": (
        806,
        _ONE_STATE + "the batch queues are the accumulator's state, decided on by it",
    ),
    "class brokerlite/shares/fetcher.py:ShareFetcher": (
        733,
        _ONE_STATE + "the share-partitions whose offsets ShareOffsetsAdmin alters",
    ),
}


@functools.cache
def measure() -> dict[str, int]:
    """Every module, class (with its mixins) and function over its limit, with
    its lines (read once per run: the tests below only compare)."""
    found: dict[str, int] = {}
    trees: dict[str, tuple[str, ast.Module]] = {}
    for part in PARTS:
        for path in source_trees.python_files(REPO / part):
            where = path.relative_to(REPO).as_posix()
            if where.startswith(GENERATED):
                continue
            text = source_trees.source(path)
            lines = text.count("\n") + (not text.endswith("\n") and bool(text))
            if lines > LIMITS["module"]:
                found[f"module {where}"] = lines
            parsed = source_trees.tree(path)
            _walk(parsed, where, "", found)
            trees[_module(path)] = (where, parsed)
    for key, size in with_bases(trees).items():
        if size > LIMITS["class"]:
            found[key] = size
    return found


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def with_bases(trees: dict[str, tuple[str, ast.Module]]) -> dict[str, int]:
    """``"class path:Name"`` -> the lines of each top-level class that inherits
    from classes of ``trafka`` (module name -> (path, AST)), with theirs."""
    classes: dict[tuple[str, str], ast.ClassDef] = {}
    names: dict[str, dict[str, tuple[str, str]]] = {}  # module -> local name -> (module, name)
    for module, (where, tree) in trees.items():
        package = module if where.endswith("__init__.py") else module.rpartition(".")[0]
        local = names.setdefault(module, {})
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join([*up, *([node.module] if node.module else [])])
                elif node.module and node.module.startswith("trafka."):
                    source = node.module.removeprefix("trafka.")
                else:
                    continue
                for alias in node.names:
                    local[alias.asname or alias.name] = (source, alias.name)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[module, node.name] = node
                local[node.name] = (module, node.name)

    def resolve(module: str, base: ast.expr) -> tuple[str, str] | None:
        if isinstance(base, ast.Subscript):
            base = base.value
        if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
            ref = names.get(module, {}).get(base.value.id)
            target = ".".join(ref) if ref is not None else ""
            return (target, base.attr) if (target, base.attr) in classes else None
        if not isinstance(base, ast.Name):
            return None
        ref = names.get(module, {}).get(base.id)
        for _ in range(8):  # through the packages that re-export it
            if ref is None or ref in classes:
                return ref
            ref = names.get(ref[0], {}).get(ref[1])
        return None

    def ancestors(key: tuple[str, str], seen: set[tuple[str, str]]) -> set[tuple[str, str]]:
        for base in classes[key].bases:
            found = resolve(key[0], base)
            if found is not None and found not in seen and found != key:
                seen.add(found)
                ancestors(found, seen)
        return seen

    sizes: dict[str, int] = {}
    for key in classes:
        bases = ancestors(key, set())
        if bases:
            where = trees[key[0]][0]
            sizes[f"class {where}:{key[1]}"] = sum(
                _lines(classes[k]) for k in (key, *sorted(bases))
            )
    return sizes


def _lines(node: ast.stmt) -> int:
    assert node.end_lineno is not None
    return node.end_lineno - node.lineno + 1


def _walk(node: ast.AST, where: str, prefix: str, found: dict[str, int]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            kind = "class" if isinstance(child, ast.ClassDef) else "function"
            name = f"{prefix}{child.name}"
            assert child.end_lineno is not None
            size = child.end_lineno - child.lineno + 1
            if size > LIMITS[kind]:
                found[f"{kind} {where}:{name}"] = size
            _walk(child, where, f"{name}.", found)
        else:
            _walk(child, where, prefix, found)


def _listed() -> dict[str, int]:
    return {**OVER, **{k: size for k, (size, _) in STACKS.items()}}


def test_nothing_new_is_over_its_limit() -> None:
    listed = _listed()
    new = {k: v for k, v in measure().items() if k not in listed}
    assert new == {}, f"over the limits {LIMITS}: split them along a real seam"


def test_what_is_listed_has_not_grown() -> None:
    found, listed = measure(), _listed()
    grown = {k: (listed[k], v) for k, v in found.items() if k in listed and v > listed[k]}
    assert grown == {}, "(listed, now): these grew; split them rather than raise the list"


def test_the_list_follows_what_shrank() -> None:
    found = measure()
    stale = {k: (v, found.get(k)) for k, v in _listed().items() if found.get(k) != v}
    assert stale == {}, "(listed, now): lower or remove these entries of OVER or STACKS"


def test_a_stack_that_stays_says_why_in_its_docstring() -> None:
    """A mixin stack kept because its concerns share one state says so where a
    reader meets the class, not only here."""
    silent = []
    for key, (_, why) in STACKS.items():
        assert why.startswith((_ONE_STATE, _ONE_INTERFACE, _TO_SPLIT)), key
        if not why.startswith(_TO_SPLIT):
            where, _, name = key.removeprefix("class ").partition(":")
            node = next(
                n
                for n in source_trees.tree(REPO / where).body
                if isinstance(n, ast.ClassDef) and n.name == name
            )
            said = why.partition(":")[0]  # "one state" or "one interface"
            if said not in " ".join((ast.get_docstring(node) or "").split()):
                silent.append(key)
    assert silent == [], "say in these classes' docstrings why their parts are one class"


def test_a_class_is_measured_with_the_classes_it_inherits() -> None:
    """Bases from another module (relative, absolute, re-exported by a
    package, as ``module.Name``) count once each; outside classes do not."""
    sources = {
        "sdk.parts": "sdk/parts.py",
        "sdk.pkg": "sdk/pkg/__init__.py",
        "sdk.pkg.deep": "sdk/pkg/deep.py",
        "sdk.big": "sdk/big.py",
    }
    texts = {
        "sdk.parts": "class State:\n    x = 1\n    y = 2\n\nclass A(State):\n    a = 1\n",
        "sdk.pkg": "from .deep import B\n",
        "sdk.pkg.deep": "from ..parts import State\nclass B(State):\n    b = 1\n",
        "sdk.big": (
            "import abc\nfrom . import parts\nfrom .pkg import B\n"
            "from trafka.sdk.parts import A\n"
            "class Big(A, B, parts.State, abc.ABC):\n    z = 1\n"
        ),
    }
    trees = {m: (sources[m], ast.parse(texts[m])) for m in sources}
    sizes = with_bases(trees)
    # Big 2 + A 2 + B 2 + State 3 (once); A 2 + State 3; B 2 + State 3.
    assert sizes == {
        "class sdk/big.py:Big": 9,
        "class sdk/parts.py:A": 5,
        "class sdk/pkg/deep.py:B": 5,
    }


def test_the_walk_sees_nested_classes_and_functions() -> None:
    body = "class A:\n" + "    def f(self):\n" + "        x = 1\n" * 120
    found: dict[str, int] = {}
    _walk(ast.parse(body), "m.py", "", found)
    assert found == {"function m.py:A.f": 121}


if __name__ == "__main__":
    for key, size in sorted(measure().items()):
        print(f"    {key!r}: {size},")
