"""The packages of `src/aiayn` import each other without a circle, read from their source (imports in
functions included, those under `if TYPE_CHECKING:` not: they never run)."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "aiayn"
PACKAGES = ("modules", "models", "data", "decoding", "tasks", "training", "serve", "export", "interop", "plots",
            "commands")


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "aiayn" and parts[1] in PACKAGES else None


def type_checking_only(node: ast.AST, parents: dict) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def package_imports(src: Path = SRC) -> dict[str, dict[str, str]]:
    """package -> {package it imports: the first "file:line" that does}."""
    graph: dict[str, dict[str, str]] = {}
    for path in sorted(src.rglob("*.py")):
        me = package_of(".".join(("aiayn", *path.relative_to(src).with_suffix("").parts)))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or type_checking_only(node, parents):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for other in filter(None, map(package_of, names)):
                if me and other != me:
                    graph.setdefault(me, {}).setdefault(other, f"{path.relative_to(src.parent)}:{node.lineno}")
    return graph


def circle(graph: dict[str, dict[str, str]]) -> list[str]:
    """One circle of imports as ["a -> b (file:line)", ...], or [] when there is none."""
    def walk(node: str, path: list[str]) -> list[str]:
        for other in graph.get(node, {}):
            if other in path:
                loop = path[path.index(other):] + [other]
                return [f"{a} -> {b} ({graph[a][b]})" for a, b in zip(loop, loop[1:])]
            found = walk(other, path + [other])
            if found:
                return found
        return []

    return next((found for start in graph if (found := walk(start, [start]))), [])


def test_the_circle_finder_finds_a_circle_of_three():
    graph = {"a": {"b": "x:1"}, "b": {"c": "x:2"}, "c": {"a": "x:3", "d": "x:4"}}
    assert circle(graph) == ["a -> b (x:1)", "b -> c (x:2)", "c -> a (x:3)"]
    assert circle({"a": {"b": "x:1"}, "b": {"c": "x:2"}}) == []


def test_no_package_imports_another_in_a_circle():
    assert circle(package_imports()) == []
