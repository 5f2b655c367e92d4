"""The pipeline's two layers, read from the import statements (docs/contributing.md, "Layout").

The plain layer never loads LibCST: a run the cache (or the text prefilter) answers stays cheap.
Only ``run`` hands files over to the LibCST layer, inside the function that checks the files the
cache does not answer. No two modules import each other, directly or around a loop.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Import name -> folder (pyproject's package-dir).
PACKAGES = {"gradfix": ROOT / "gradfix", "gradfix.codemods": ROOT / "codemods", "gradfix.cli": ROOT / "cli"}
CODEMODS = "gradfix.codemods"
PLAIN_LAYER = {
    f"{CODEMODS}.{name}"
    for name in (
        "report",
        "files",
        "project",
        "diffs",
        "source",
        "frameworks",
        "torch_api",
        "summaries",
        "config",
        "cache",
        "shard",
        "notebook",
        "symptoms",
        "registry",
        "rule",
        "run",
        "typed_json",
    )
}
LIBCST_LAYER = {f"{CODEMODS}.{name}" for name in ("parse", "skeleton", "check", "edits", "analysis", "rules", "execution")}
ENTRY_POINTS = {f"{CODEMODS}.api"}  # the library's door: one source (LibCST) or many paths (run)
# The imports from the plain layer into the LibCST layer: the files the cache does not answer are
# checked, and the summaries of project modules it does not know are computed; only then is LibCST
# loaded.
HAND_OVER = {(f"{CODEMODS}.run", f"{CODEMODS}.check"), (f"{CODEMODS}.project", f"{CODEMODS}.check")}


def _module_files() -> dict[str, Path]:
    modules = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


MODULES = _module_files()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _package_of(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _targets(importer: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The modules an import statement runs: each module it names and the packages above it
    (those above the importer are loaded already: ``from . import backward_calls`` runs
    ``backward_calls`` alone), and for ``from package import name`` the submodule ``name``."""
    named: set[str] = set()
    if isinstance(node, ast.Import):
        named = {alias.name for alias in node.names}
    else:
        base = node.module or ""
        if node.level:
            package = _package_of(importer)
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        named.add(base)
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            if submodule in MODULES:
                named.add(submodule)
    targets = set()
    for module in named:
        parts = module.split(".")
        for end in range(1, len(parts) + 1):
            prefix = ".".join(parts[:end])
            if prefix in MODULES and not (importer == prefix or importer.startswith(prefix + ".")):
                targets.add(prefix)
        if parts[0] == "libcst":
            targets.add("libcst")
    return targets


def _imports(module: str) -> tuple[set[str], set[str], set[str]]:
    """The modules ``module`` imports when it is imported, those its functions import when they
    run, and those it imports under ``if TYPE_CHECKING:`` (for a type checker only; never run)."""
    at_import, in_functions, for_types = set(), set(), set()

    def visit(node: ast.AST, in_function: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for statement in child.body:
                    visit_statement(statement, in_function, True)
                for statement in child.orelse:
                    visit_statement(statement, in_function, type_only)
                continue
            visit_statement(child, in_function, type_only)

    def visit_statement(node: ast.AST, in_function: bool, type_only: bool) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            (for_types if type_only else in_functions if in_function else at_import).update(_targets(module, node))
        visit(node, in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)), type_only)

    visit(TREES[module], False, False)
    return at_import, in_functions, for_types


IMPORTS = {module: _imports(module) for module in MODULES}


def _layer(module: str) -> str | None:
    for layer, members in (("plain", PLAIN_LAYER), ("libcst", LIBCST_LAYER), ("entry", ENTRY_POINTS)):
        if any(module == m or module.startswith(m + ".") for m in members):
            return layer
    return None


def _forbidden(module: str) -> bool:
    """Whether the plain layer may not load ``module``: LibCST, or a module of the LibCST layer."""
    return module == "libcst" or _layer(module) == "libcst"


def _loop(modules: Iterable[str], through_any_import: bool = False) -> list[str]:
    """One loop of imports among ``modules``, or []: of module-level imports, or, with
    ``through_any_import``, of any import (in a function, or for a type checker only) too."""
    modules = set(modules)
    state: dict[str, str] = {}
    path: list[str] = []

    def search(module: str) -> list[str]:
        state[module], path[len(path) :] = "open", [module]
        imported = set().union(*IMPORTS[module]) if through_any_import else IMPORTS[module][0]
        for target in sorted(imported & modules):
            if state.get(target) == "open":
                return path[path.index(target) :] + [target]
            if target not in state and (found := search(target)):
                return found
        state[module] = "done"
        path.pop()
        return []

    for module in sorted(modules):
        if module not in state and (found := search(module)):
            return found
    return []


def _reach_of_plain(module: str) -> dict[str, list[str]]:
    """What ``module`` loads, each with the chain of imports that loads it: what it imports, and
    what a function of the library (``gradfix.codemods``) imports when it runs; the hand-over to
    the LibCST layer is not followed. (The command and the package above the library are its
    callers: a function of theirs runs only when they call it.)"""
    chains = {module: [module]}
    queue = [module]
    while queue:
        current = queue.pop(0)
        at_import, in_functions, _ = IMPORTS.get(current, (set(), set(), set()))
        for target in sorted(at_import | in_functions if current.startswith(CODEMODS + ".") else at_import):
            if target not in chains and (current, target) not in HAND_OVER:
                chains[target] = chains[current] + [target]
                if target in MODULES:
                    queue.append(target)
    return chains


def test_no_import_loop():
    assert _loop(MODULES) == []


def test_no_import_loop_in_the_analysis_not_even_through_a_function_or_a_type():
    """A loop closed by an import in a function or under ``if TYPE_CHECKING:`` still ties its
    modules together: none can be read, tested or moved alone."""
    analysis = f"{CODEMODS}.analysis"
    assert _loop((m for m in MODULES if m == analysis or m.startswith(analysis + ".")), through_any_import=True) == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(f"{CODEMODS}.analysis")))
def test_no_module_of_the_analysis_is_longer_than_800_lines(module):
    """A module a reader can hold in mind: one part of what the analysis models, not a slice of it."""
    assert len(MODULES[module].read_text().splitlines()) <= 800


def test_every_module_of_the_library_has_a_layer():
    top_level = {m for m in MODULES if m.startswith(CODEMODS + ".") and m.count(".") == 2}
    assert {m for m in top_level if _layer(m) is None} == set()


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m) == "plain"))
def test_the_plain_layer_never_loads_libcst(module):
    reached = {target: " -> ".join(chain) for target, chain in _reach_of_plain(module).items() if _forbidden(target)}
    assert reached == {}


def test_the_hand_over_is_the_one_place_the_plain_layer_imports_the_libcst_layer():
    direct = {(m, t) for m in MODULES if _layer(m) == "plain" for t in IMPORTS[m][0] | IMPORTS[m][1] if _forbidden(t)}
    assert direct <= HAND_OVER


def test_the_analysis_has_one_door():
    analysis = f"{CODEMODS}.analysis"
    inside = {m for m in MODULES if m.startswith(analysis + ".")}
    through_the_side = {
        (importer, target)
        for importer in MODULES
        if importer != analysis and importer not in inside
        for target in (IMPORTS[importer][0] | IMPORTS[importer][1]) & inside
    }
    assert through_the_side == set()
