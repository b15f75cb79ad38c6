"""The package's layers point one way: no import circles, and each layer imports only the layers
below it (read from the source, so it fails before anything runs).

Every ``import`` and ``from ... import`` statement counts, wherever it is: at the top, inside a
function (a lazy import of a module that imports you back is still a circle), and under
``TYPE_CHECKING`` (a type names what a module knows: it points one way too). An import by name
at run time (``importlib.import_module``) is not seen. Importing ``a.b.c`` runs the packages
``a`` and ``a.b`` first: that implicit step is not an edge, so a package's ``__init__`` keeps its
imports of its own modules lazy where they would lead back to it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "divergence"

LEAVES = ("divergence.errors", "divergence.wording", "divergence.version")
STORE = (*LEAVES, "divergence.fingerprint", "divergence.store")
# The words of the note codes: compare's texts, replay's errors and record's last lines quote
# notes too, so the one table of words (built on store alone) is theirs to import.
NOTE_WORDS = "divergence.report.notes"
READ = (*STORE, "divergence.compare", NOTE_WORDS)
WRITE = (*STORE, "divergence.record", NOTE_WORDS)
RECORDER = (*WRITE, "divergence.frameworks")
BOTH = (*READ, "divergence.report", "divergence.record")
# module prefix -> the prefixes it may import besides its own (the longest prefix decides)
LAYERS: dict[str, tuple[str, ...]] = {
    "divergence": ("divergence.api", "divergence.version"),  # the package itself: lazy API
    "divergence.__main__": ("divergence.cli",),
    "divergence.errors": (),
    "divergence.wording": (),
    "divergence.version": (),
    "divergence.fingerprint": LEAVES,
    "divergence.store": STORE,
    "divergence.compare": READ,  # reads runs
    "divergence.report": READ,  # renders compare's results
    NOTE_WORDS: STORE,
    "divergence.record": WRITE,  # writes runs
    "divergence.frameworks": RECORDER,  # builds on the recorder
    "divergence.api": RECORDER,
    "divergence.bootstrap": RECORDER,  # starts the recorder in a child process
    "divergence.hunt": BOTH,  # records, compares, reports
    "divergence.cli": (*BOTH, "divergence.frameworks", "divergence.hunt"),
}
# what a module outside compare may import from it: the package (its entry points) and the
# results it hands out; the rest is how it reaches them
COMPARE_API = ("divergence.compare", "divergence.compare.model", "divergence.compare.show")
# a framework (top-level module name) -> the only prefix that may import it
FRAMEWORKS = {
    "torch": "divergence.frameworks.torch",
    "triton": "divergence.frameworks.torch",
    "tensorflow": "divergence.frameworks.tensorflow",
    "keras": "divergence.frameworks.tensorflow",
    "tf_keras": "divergence.frameworks.tensorflow",
}

Edge = tuple[str, str, int]  # importer, imported, line


def modules() -> dict[str, Path]:
    """``divergence.x.y`` -> its file, for every module and package of the source tree."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: Iterable[str]) -> list[Edge]:
    """Every module ``name`` imports (``from a import b``: ``a.b`` when that is a module)."""
    known = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges: set[Edge] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            edges.update((name, alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                edges.add((name, target if target in known else base, node.lineno))
    return sorted(edges, key=lambda edge: (edge[2], edge[1]))


def graph() -> tuple[dict[str, Path], list[Edge]]:
    found = modules()
    return found, [edge for name, path in found.items() for edge in imports(name, path, found)]


def circles(nodes: Iterable[str], edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    successors: dict[str, set[str]] = {node: set() for node in nodes}
    for source, target, _ in edges:
        if target in successors and target != source:
            successors[source].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(successors[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(successors):
        if node not in index:
            visit(node)
    return sorted(found)


def layer(module: str) -> str | None:
    """The row of :data:`LAYERS` that rules ``module``: its longest prefix (the package root
    rules only itself)."""
    if module == "divergence":
        return module
    rows = [p for p in LAYERS if p != "divergence" and (module == p or module.startswith(p + "."))]
    return max(rows, key=len, default=None)


def within(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def wrong_way(found: dict[str, Path], edges: list[Edge]) -> list[str]:
    """``file:line: importer -> imported`` for each import the layer table does not allow."""
    lines = []
    for source, target, line in edges:
        where = f"{found[source].relative_to(PACKAGE.parent)}:{line}: {source} -> {target}"
        top = target.split(".")[0]
        if top in FRAMEWORKS and not within(source, [FRAMEWORKS[top]]):
            lines.append(f"{where} (only {FRAMEWORKS[top]} imports {top})")
        if top != "divergence" or layer(target) == layer(source):
            continue
        row = layer(source)
        if row is None:
            lines.append(f"{where} ({source} has no row in LAYERS)")
        elif not within(target, LAYERS[row]):
            lines.append(f"{where} ({row} may not import {layer(target) or target})")
    return lines


def into_compare(found: dict[str, Path], edges: list[Edge]) -> list[str]:
    """``file:line: importer -> imported`` for each import of compare's insides from outside."""
    return [
        f"{found[source].relative_to(PACKAGE.parent)}:{line}: {source} -> {target}"
        for source, target, line in edges
        if within(target, ["divergence.compare"])
        and not within(source, ["divergence.compare"])
        and target not in COMPARE_API
    ]


def test_no_import_circles() -> None:
    found, edges = graph()
    inner = [e for e in edges if e[1] in found]
    report = []
    for component in circles(found, inner):
        members = set(component)
        report.append(" <-> ".join(component))
        report += [
            f"    {found[s].relative_to(PACKAGE.parent)}:{line}: {s} -> {t}"
            for s, t, line in sorted(inner, key=lambda edge: (edge[0], edge[2]))
            if s in members and t in members and s != t
        ]
    assert not report, "import circles (every edge inside each):\n" + "\n".join(report)


def test_imports_point_down_the_layers() -> None:
    found, edges = graph()
    unruled = sorted(m for m in found if layer(m) is None)
    assert not unruled, f"modules without a row in LAYERS: {', '.join(unruled)}"
    report = wrong_way(found, edges)
    assert not report, "imports against the layers:\n" + "\n".join(report)


def test_only_compares_entry_points_and_results_are_imported_from_outside_it() -> None:
    found, edges = graph()
    report = into_compare(found, edges)
    allowed = ", ".join(COMPARE_API)
    assert not report, f"imports of compare's insides (only {allowed}):\n" + "\n".join(report)


def test_the_layer_table_names_modules_that_are_there() -> None:
    named = {p for row, allowed in LAYERS.items() for p in (row, *allowed)} | set(COMPARE_API)
    missing = sorted(named - set(modules()))
    assert not missing, f"LAYERS names modules that are not there: {', '.join(missing)}"


def test_the_walk_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from divergence.record.session import Session\n"
        "def f():\n    from . import engine\n    import torch.nn\n"
    )
    found = ["divergence.compare.engine", "divergence.compare.x"]
    targets = [t for _, t, _ in imports("divergence.compare.x", source, found)]
    assert targets == [
        "typing",
        "divergence.record.session",
        "divergence.compare.engine",
        "torch.nn",
    ]
    edges = [("divergence.compare.x", t, 1) for t in targets]
    assert circles(["a", "b", "c"], [("a", "b", 1), ("b", "c", 1), ("c", "a", 1)]) == [
        ["a", "b", "c"]
    ]
    paths = {"divergence.compare.x": PACKAGE / "compare" / "x.py"}
    assert [line.split(" (")[0].split(": ")[1] for line in wrong_way(paths, edges)] == [
        "divergence.compare.x -> divergence.record.session",
        "divergence.compare.x -> torch.nn",
    ]
    outside = [("divergence.report.y", t, 1) for t in ("divergence.compare", *found)]
    paths["divergence.report.y"] = PACKAGE / "report" / "y.py"
    assert [line.split(": ")[1] for line in into_compare(paths, outside)] == [
        "divergence.report.y -> divergence.compare.engine",
        "divergence.report.y -> divergence.compare.x",
    ]
