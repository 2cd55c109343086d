"""Package code names an API by ``ApiKey``, never by its number (#65).

``conn.request(29, body)`` makes a reader look the number up; ``PRODUCE = 0`` was
defined in five modules. ``trafka.codec.ApiKey`` (generated with the messages) is
the one name of each key. The checks, from the source's AST:

- a call that passes an int literal where the called function takes an API key:
  a parameter named ``api_key`` (or ``key`` annotated ``int``) of any function or
  dataclass field in the checked parts, at its position or by keyword
  (``request_api_key=`` too, the header's field);
- a comparison of an API key (a name or attribute ``api_key``/``key``/``*_api_key``)
  with an int literal or a collection of them;
- a module- or class-level name assigned an int literal whose name says it is an
  API key: ``API_KEY``, ``*_KEY``, or a member's name of ``ApiKey``, with or
  without a leading ``_`` (outside enums, whose member names are their own);
- a dict or set literal of two or more int literals next to a name that says it
  holds API keys (``*VERSIONS``, ``*KEYS``, ``*_KEYED``, ``*EXEMPT``, ``*APIS``), or one that
  names some keys by ``ApiKey`` and others by number.

Tests keep numbers where the number is the point (wire tests), and the generated
``codec/messages`` modules define the numbers; neither is checked.
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path

import source_trees

from trafka.codec import ApiKey

REPO = Path(__file__).resolve().parents[1]
# Parts not yet converted (checked once they leave; none left).
PENDING: frozenset[str] = frozenset()
CHECKED = ("codec", "sdk", "brokerlite", "tools", "spark", "console", "compat", "proxy")
GENERATED = REPO / "codec" / "messages"

_KEY_NAME = re.compile(r"^(API_KEY|[A-Z0-9_]*_KEY)$")
_KEY_PARAMS = frozenset({"api_key", "request_api_key"})
_KEY_HOLDERS = re.compile(r"(VERSIONS|KEYS|_KEYED|EXEMPT|APIS)$")
_KEY_OPERANDS = re.compile(r"^(api_key|key|\w+_api_key|request_api_key)$")
_MEMBERS = frozenset(ApiKey.__members__)


def _int(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _ints(node: ast.AST) -> bool:
    """An int literal, or a tuple/list/set of them."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return bool(node.elts) and all(map(_int, node.elts))
    return _int(node)


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):  # frozenset({...}), dict(...)
        return _name(node.func)
    return ""


def _says_api_key(name: str) -> bool:
    return bool(_KEY_NAME.match(name)) or name.lstrip("_") in _MEMBERS


def _is_key_param(arg: ast.arg) -> bool:
    if arg.arg in _KEY_PARAMS:
        return True
    return arg.arg == "key" and isinstance(arg.annotation, ast.Name) and arg.annotation.id == "int"


@functools.cache
def _nodes(tree: ast.Module) -> tuple[ast.AST, ...]:
    """Every node of ``tree``, walked once however many checks read it."""
    return tuple(ast.walk(tree))


def key_positions(trees: Iterable[ast.Module]) -> dict[str, set[int]]:
    """Callable name -> the positional indexes where it takes an API key, from every
    function and dataclass-like class (annotated fields) in ``trees``."""
    found: dict[str, set[int]] = {}
    for tree in trees:
        for node in _nodes(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                params = [*node.args.posonlyargs, *node.args.args]
                if params and params[0].arg in ("self", "cls"):
                    params = params[1:]
                for i, arg in enumerate(params):
                    if _is_key_param(arg):
                        found.setdefault(node.name, set()).add(i)
            elif isinstance(node, ast.ClassDef):
                fields = [s.target for s in node.body if isinstance(s, ast.AnnAssign)]
                for i, target in enumerate(fields):
                    if isinstance(target, ast.Name) and target.id in _KEY_PARAMS:
                        found.setdefault(node.name, set()).add(i)
    return found


def _is_enum(node: ast.ClassDef) -> bool:
    return any("Enum" in _name(base) for base in node.bases)


def _assignments(tree: ast.Module) -> Iterator[tuple[ast.stmt, str, ast.AST]]:
    """Module-level and (non-enum) class-level ``NAME = value`` statements, a
    tuple's ``A, B = 1, 2`` pair by pair."""
    bodies: list[list[ast.stmt]] = [tree.body]
    bodies += [n.body for n in _nodes(tree) if isinstance(n, ast.ClassDef) and not _is_enum(n)]
    for stmt in (stmt for body in bodies for stmt in body):
        if isinstance(stmt, ast.Assign):
            pairs = [(target, stmt.value) for target in stmt.targets]
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            pairs = [(stmt.target, stmt.value)]
        else:
            continue
        for target, value in pairs:
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                pairs += zip(target.elts, value.elts, strict=False)
            elif isinstance(target, ast.Name):
                yield stmt, target.id, value


def _int_collection(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and node.args:  # frozenset({...})
        node = node.args[0]
    if isinstance(node, ast.Dict):
        keys = [k for k in node.keys if k is not None]
        return len(keys) >= 2 and sum(map(_int, keys)) >= 2
    if isinstance(node, ast.Set | ast.Tuple | ast.List):
        return len(node.elts) >= 2 and all(map(_int, node.elts))
    return False


def _mixed_collection(node: ast.AST) -> bool:
    """A collection that names some keys by ``ApiKey`` and others by number."""
    if isinstance(node, ast.Call) and node.args:
        node = node.args[0]
    elts = [k for k in node.keys if k is not None] if isinstance(node, ast.Dict) else []
    if isinstance(node, ast.Set | ast.Tuple | ast.List):
        elts = node.elts
    named = any(
        (isinstance(e, ast.Attribute) and _name(e.value) == "ApiKey")
        or (isinstance(e, ast.Name) and _says_api_key(e.id))
        for e in elts
    )
    return named and any(map(_int, elts))


def numbered_keys(tree: ast.Module, positions: dict[str, set[int]]) -> list[tuple[int, str]]:
    """Where ``tree`` names an API key by its number: (line, what)."""
    found: list[tuple[int, str]] = []
    for node in _nodes(tree):
        if isinstance(node, ast.Call):
            at = positions.get(_name(node.func), set())
            literal = [i for i in at if i < len(node.args) and _int(node.args[i])]
            keywords = [k.arg for k in node.keywords if k.arg in _KEY_PARAMS and _int(k.value)]
            if literal or keywords:
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.comprehension | ast.For) and _ints(node.iter):
            if _KEY_OPERANDS.match(_name(node.target)):  # for key in (10, 22)
                found.append(
                    (node.iter.lineno, f"{_name(node.target)} in {ast.unparse(node.iter)}")
                )
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_KEY_OPERANDS.match(_name(s)) for s in sides) and any(map(_ints, sides)):
                found.append((node.lineno, ast.unparse(node)))
    for stmt, name, value in _assignments(tree):
        if _int(value) and _says_api_key(name):
            found.append((stmt.lineno, f"{name} = {ast.unparse(value)}"))
        elif (_KEY_HOLDERS.search(name) and _int_collection(value)) or _mixed_collection(value):
            found.append((stmt.lineno, f"{name} = {ast.unparse(value)[:60]}"))
    return sorted(found)


@functools.cache
def _sources() -> tuple[tuple[Path, ast.Module], ...]:
    """Every checked part's modules, parsed once per run."""
    return tuple(
        (path, source_trees.tree(path))
        for part in CHECKED
        for path in source_trees.python_files(REPO / part)
        if GENERATED not in path.parents
    )


def package_findings(parts: Iterable[str]) -> list[str]:
    """The findings in ``parts``. A call is read against the definitions of its
    part first (``request`` is the connection's in the SDK, the inter-broker
    link's in brokerlite), then against all of them (the codec's ``api``)."""
    sources = _sources()
    everywhere = key_positions(tree for _, tree in sources)
    found = []
    for part in parts:
        mine = [(path, tree) for path, tree in sources if path.relative_to(REPO).parts[0] == part]
        positions = everywhere | key_positions(tree for _, tree in mine)
        for path, tree in mine:
            found += [
                f"{path.relative_to(REPO)}:{n}: {w}" for n, w in numbered_keys(tree, positions)
            ]
    return found


def test_package_code_names_api_keys_by_apikey() -> None:
    assert package_findings(p for p in CHECKED if p not in PENDING) == []


_PLANTED = textwrap.dedent(
    """
    import enum
    API_KEY = 9
    _PRODUCE = 0
    FETCH_KEY = 1
    CLIENT_VERSIONS = {0: (3, 13), 1: (4, 18)}
    _QUOTA_EXEMPT = frozenset({17, 36})
    OK_KEY = ApiKey.FETCH
    _LIST_OFFSETS, _LIMIT = 2, 5
    _WRITES = frozenset({ApiKey.OFFSET_COMMIT, 76})
    TIMEOUT = 30
    MAX_VERSIONS = {key: VERSIONS[key] for key in (10, 22)}

    class Operation(enum.IntEnum):
        DESCRIBE_CONFIGS = 10

    def request(api_key: int, body: object) -> None: ...
    def decode(frame: bytes, key: int, version: int) -> None: ...
    def lookup(key: str) -> None: ...

    async def run(conn, head):
        await conn.request(29, body)
        conn.request(ApiKey.DESCRIBE_ACLS, body)
        decode(frame, 3, 12)
        Header(request_api_key=18, request_api_version=3)
        lookup(7)
        if head.api_key == 18 or api_key in (17, 36):
            pass
        if head.api_version == 3:
            pass
    """
)


def test_the_check_finds_planted_numbers_and_nothing_else() -> None:
    tree = ast.parse(_PLANTED)
    found = {what for _, what in numbered_keys(tree, key_positions([tree]))}
    assert found == {
        "API_KEY = 9",
        "_PRODUCE = 0",
        "FETCH_KEY = 1",
        "_LIST_OFFSETS = 2",
        "key in (10, 22)",
        "_WRITES = frozenset({ApiKey.OFFSET_COMMIT, 76})",
        "CLIENT_VERSIONS = {0: (3, 13), 1: (4, 18)}",
        "_QUOTA_EXEMPT = frozenset({17, 36})",
        "conn.request(29, body)",
        "decode(frame, 3, 12)",
        "Header(request_api_key=18, request_api_version=3)",
        "head.api_key == 18",
        "api_key in (17, 36)",
    }


def test_the_pending_parts_are_still_pending() -> None:
    """Once a pending part passes, it leaves PENDING (and stays checked)."""
    for part in PENDING:
        assert package_findings([part]) != [], f"{part} passes now: drop it from PENDING"
