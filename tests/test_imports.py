"""No import loop among the project's modules: the graph of imports of gdpcore, tasks and flows is acyclic, with
and without the imports inside functions.

The graph is read from the source (``ast``), not from ``sys.modules``: an edge A -> B for every ``import B`` /
``from B import x`` executed when A is imported (module level, outside ``if TYPE_CHECKING:``), where ``from P import
m`` points at the submodule ``P.m`` when there is one. A package's implicit import of its parent ``__init__`` is not an
edge (every module would otherwise sit in a loop with its package). Adding the imports inside functions as edges must
leave the graph acyclic too: a function-level import must not be a way to dodge a loop. They are listed by
:func:`function_level_imports`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gdpcore", "tasks", "flows")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    out: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
    return out


def _targets(module: str, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module if modules[module].name == "__init__.py" else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    return {t for n in names if (t := _resolve(n, modules)) is not None and t != module}


def _function_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    return [
        node
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(fn)
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]


def import_graph(*, with_function_imports: bool = False) -> dict[str, set[str]]:
    """Module -> the project modules it imports (module level; plus inside functions if ``with_function_imports``)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        nodes = _top_level_imports(tree) + (_function_imports(tree) if with_function_imports else [])
        graph[name] = set().union(*(_targets(name, n, modules) for n in nodes))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def function_level_imports() -> list[str]:
    """``module:line imported`` for every import inside a function of gdpcore, tasks or flows."""
    modules = _modules()
    out = []
    for name, path in modules.items():
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and node.module:
                        out.append(f"{name}:{node.lineno} {node.module}")
                    elif isinstance(node, ast.Import):
                        out.append(f"{name}:{node.lineno} {', '.join(a.name for a in node.names)}")
    return out


def test_the_graph_reader_sees_known_edges():
    graph = import_graph()
    assert "gdpcore.mechanisms" in graph["gdpcore.kinds.registry"]
    assert "gdpcore.kinds" in graph["gdpcore.engine"] or any(m.startswith("gdpcore.engine") for m in graph)
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_loop_among_gdpcore_tasks_flows():
    found = cycles(import_graph())
    assert found == [], found


def test_no_function_level_import_closes_a_loop():
    found = cycles(import_graph(with_function_imports=True))
    assert found == [], found


def test_the_kind_registry_is_imported_by_mechanisms_never_the_reverse():
    graph = import_graph()
    reach, todo = set(), ["gdpcore.mechanisms"]
    while todo:
        for w in graph[todo.pop()] - reach:
            reach.add(w)
            todo.append(w)
    assert not any(m.startswith(("gdpcore.kinds", "gdpcore.representations")) for m in reach), reach


if __name__ == "__main__":
    for c in cycles(import_graph(with_function_imports=True)):
        print("cycle:", " <-> ".join(c))
    print("\n".join(function_level_imports()))
