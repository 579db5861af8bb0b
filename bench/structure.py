"""
The structure measures of issue 20: `python bench/structure.py` prints them for the checkout.

Definitions:

- Product files: every file (Python, templates, schemas) under the packages PACKAGES, and the
  top-level *.py (the pyinfra deploy files). __pycache__ is skipped. The simulator (SIM, the
  top-level package `simulator/`, not shipped in the wheel) is measured with them, as its own
  row: its files, lines and import cycles count, and "files a kind touches" shows it apart.
- Largest files: the product's Python files with the most lines.
- Import cycles: the strongly connected components of more than one module (or a module that
  imports itself) of the graph of imports between product modules. Every `import` and
  `from ... import` statement counts, inside functions and `if TYPE_CHECKING` too: each is
  a dependency someone reading or moving the module must follow. `from pkg import name` is an
  edge to pkg.name when that is a module, else to pkg.
- Files a kind touches: for each partition kind constant of enforcer/model.py (KINDS), the
  product files (tests not; the simulator counted apart) that name the kind: a Python file that
  uses the constant in code (`HYGON`: a name, an attribute or an imported name; comments do not
  count) or has its value as a string (`"hygon-vdcu"`); any other file (templates, schemas)
  that contains its value or the kind's tool (TOOLS: `hy-smi`) as a word. A Python file that
  imports the kind's own module (MODULES: `kinds.hygon`, by `import` or `from kinds import`)
  names it too: the registry line, and what reads the kind's constants from its module.

Today's numbers (main at the start of issue 20) are in bench/RESULTS.md, "Structure".
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("enforcer", "facts", "kinds", "operations", "schemas")
SIM = "simulator"  # the simulated node: outside the product, measured beside it
KINDS = ("VNPU", "MIG", "PPU", "HYGON", "MDEV", "VFIO")
# What a template or schema of the kind names: its tool, or the sysfs it reads.
TOOLS = {
    "VNPU": "npu-smi",
    "MIG": "nvidia-smi",
    "PPU": "ppu-smi",
    "HYGON": "hy-smi",
    "MDEV": "mdev_supported_types",
    "VFIO": "current_vgpu_type",
}

# The module of the kinds package each kind is in (a kind is one place: issue 20).
MODULES = {
    "VNPU": "ascend",
    "MIG": "mig",
    "PPU": "ppu",
    "HYGON": "hygon",
    "MDEV": "vgpu",
    "VFIO": "vgpu",
}


def product_files(root: Path = ROOT) -> list[Path]:
    """Product files, relative to `root`, sorted."""
    files = [p for p in root.glob("*.py")]
    for package in (*PACKAGES, SIM):
        files += [p for p in (root / package).rglob("*") if p.is_file()]
    return sorted(p.relative_to(root) for p in files if "__pycache__" not in p.parts)


def group(path: Path) -> str:
    return path.parts[0] if len(path.parts) > 1 else "(top-level)"


def lines(root: Path, path: Path) -> int:
    return len((root / path).read_text(errors="replace").splitlines())


def module_name(path: Path) -> str:
    parts = list(path.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, module: str, is_package: bool) -> Iterator[list[str]]:
    """The names each import statement of the tree names, absolute: `import x.y` [x.y];
    `from x import y` [x, x.y] (which of them is a module, the caller knows)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            yield [base, *(f"{base}.{a.name}" for a in node.names)]


def edges(names: list[str], modules: set[str]) -> set[str]:
    """The product modules one statement imports: `from x import y` is an edge to x.y when that
    is a module (not also to the package x), else to x."""
    found = {n for n in names if n in modules}
    return {n for n in found if not any(o.startswith(n + ".") for o in found)}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Product module -> the product modules it imports."""
    paths = {module_name(p): p for p in product_files(root) if p.suffix == ".py"}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = ast.parse((root / path).read_text(), str(path))
        statements = imported(tree, name, path.name == "__init__.py")
        graph[name] = set().union(*(edges(names, set(paths)) for names in statements))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components that are cycles, each sorted, sorted (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[tuple[str, ...]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(tuple(sorted(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def kind_values(root: Path = ROOT) -> dict[str, str]:
    """Each kind constant of enforcer/model.py and its value."""
    tree = ast.parse((root / "enforcer" / "model.py").read_text())
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in KINDS:
                    values[target.id] = node.value.value
    return values


def names_in_code(tree: ast.AST) -> set[str]:
    """The names a module's code uses and the string constants it holds."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.add(node.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    return found


def imports_module(tree: ast.AST, module: str) -> bool:
    """Whether the code imports kinds.<module> (`import kinds.x`, `from kinds(.x) import ...`)."""
    full = f"kinds.{module}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == full for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level:
            if node.module == full or (
                node.module == "kinds" and any(a.name == module for a in node.names)
            ):
                return True
    return False


def names_kind(path: Path, text: str, name: str, value: str) -> bool:
    """Whether the file names the kind constant `name` of value `value` (see the docstring)."""
    if path.suffix == ".py":
        tree = ast.parse(text)
        code = names_in_code(tree)
        return name in code or value in code or imports_module(tree, MODULES[name])
    words = "|".join(re.escape(w) for w in (value, TOOLS[name]))
    return re.search(rf"(?<![\w-])({words})(?![\w-])", text) is not None


def touching(root: Path = ROOT) -> dict[str, list[Path]]:
    """Each kind constant -> the product files that name the kind."""
    values = kind_values(root)
    found: dict[str, list[Path]] = {name: [] for name in values}
    for p in product_files(root):
        text = (root / p).read_text(errors="replace")
        for name, value in values.items():
            if names_kind(p, text, name, value):
                found[name].append(p)
    return found


def report(root: Path = ROOT, largest: int = 10) -> Iterable[str]:
    files = product_files(root)
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for p in files:
        per[group(p)][0] += 1
        per[group(p)][1] += lines(root, p)
    yield f"{'package':<14} {'files':>6} {'lines':>7}"
    for name, (count, total) in sorted(per.items()):
        yield f"{name:<14} {count:>6} {total:>7}"
    total = [sum(c for c, _ in per.values()), sum(n for _, n in per.values())]
    yield f"{'total':<14} {total[0]:>6} {total[1]:>7}"
    yield ""
    yield "largest Python files (lines):"
    sized = sorted(((lines(root, p), p) for p in files if p.suffix == ".py"), reverse=True)
    yield from (f"  {n:>6}  {p.as_posix()}" for n, p in sized[:largest])
    yield ""
    found = cycles(import_graph(root))
    yield f"import cycles: {len(found)}"
    yield from (f"  {' <-> '.join(c)}" for c in found)
    yield ""
    yield "files a kind touches (outside simulator, with it):"
    for name, paths in touching(root).items():
        outside = [p for p in paths if group(p) != SIM]
        yield f"  {name:<6} {len(outside):>3} {len(paths):>3}  " + " ".join(
            p.as_posix() for p in outside
        )


def main() -> int:
    for line in report():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
