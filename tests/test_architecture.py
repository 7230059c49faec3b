"""The package's floors: every import points down, and the wheel installs one name, nest_cp."""

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import nest_cp

ROOT = Path(__file__).parent.parent

# Floors from the bottom up (STYLE.md "Layers", docs/architecture.md): each folder of nest_cp/ is
# one floor, and a module may import its own floor and below.  The structured DP (dp/, installed
# as nest_cp.dp) is a solver; the certification harness (verify/, nest_cp.verify) a harness;
# verify's command definitions sit with the command line.
FLOORS = (
    ("nest_cp.model",),
    ("nest_cp.profiles",),
    ("nest_cp.io",),
    ("nest_cp.cost",),
    ("nest_cp",),  # the package re-exports the public API: model, files and the evaluator
    ("nest_cp.solvers", "nest_cp.dp"),
    ("nest_cp.harness", "nest_cp.verify"),
    ("nest_cp.cli", "nest_cp.verify.cli"),
)
# nest_cp/ shows its architecture: the layers' folders and the package's __init__, nothing else.
TOP_LEVEL = {"__init__.py", "model", "profiles", "io", "cost", "solvers", "harness", "cli"}


def _floor(module: str) -> int:
    """The floor of a module: the one of its longest listed prefix."""
    best, floor = -1, None
    for index, names in enumerate(FLOORS):
        for name in names:
            if (module == name or (name != "nest_cp" and module.startswith(name + "."))) \
                    and len(name) > best:
                best, floor = len(name), index
    if floor is None:
        raise AssertionError(f"{module} is on no floor of tests/test_architecture.py")
    return floor


def _modules() -> dict[str, Path]:
    """Every module of the installed namespace and the file it comes from."""
    found = {}
    for package, folder in (("nest_cp", ROOT / "nest_cp"), ("nest_cp.dp", ROOT / "dp"),
                            ("nest_cp.verify", ROOT / "verify")):
        for file in folder.rglob("*.py"):
            parts = file.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((package, *parts))
            if name.split(".")[1:2] in (["dp"], ["verify"]) and package == "nest_cp":
                continue  # nest_cp/ holds no dp/ or verify/ folder; guard anyway
            found[name] = file
    return found


def _imports(file: Path, module: str) -> set[str]:
    """nest_cp modules imported anywhere in ``file`` (module level or inside functions)."""
    names = set()
    package = module if file.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            if base != "nest_cp":  # from nest_cp import cost imports nest_cp.cost
                names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in names if name == "nest_cp" or name.startswith("nest_cp.")}


@pytest.mark.parametrize("module", sorted(_modules()))
def test_imports_point_down(module: str):
    """A module imports only modules of its own floor or below (never a harness or the CLI)."""
    file = _modules()[module]
    mine = _floor(module)
    modules = _modules()
    for imported in _imports(file, module):
        if imported not in modules:
            continue  # a name imported from a module, e.g. nest_cp.cost.ceil_div
        assert _floor(imported) <= mine, f"{module} (floor {mine}) imports {imported} " \
                                         f"(floor {_floor(imported)})"


def test_no_import_cycle():
    """No two modules import each other, directly or through others (function-level imports
    included): the floors are a strict order, and inside a floor the imports form a DAG."""
    modules = _modules()
    graph = {module: {name for name in _imports(file, module) if name in modules}
             for module, file in modules.items()}
    for module, imported in graph.items():  # importing a package runs its __init__
        for name in list(imported):
            parts = name.split(".")
            imported.update(".".join(parts[:i]) for i in range(2, len(parts))
                            if ".".join(parts[:i]) in modules)
        imported.discard(module)
        if module != "nest_cp":
            imported.discard("nest_cp")  # the root package only re-exports lower floors
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        if state.get(module) == 2:
            return
        assert state.get(module) != 1, "import cycle: " + " -> ".join([*path, module])
        state[module] = 1
        for name in sorted(graph[module]):
            if not module.startswith(name + "."):  # a module may import its own package
                visit(name, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        visit(module, [])


def test_top_level_shows_the_layers():
    """nest_cp/ holds at most about ten entries, each a layer folder with a documented
    __init__ (its floor and modules) or the package's own __init__."""
    entries = {path.name for path in (ROOT / "nest_cp").iterdir()
               if path.name != "__pycache__"}
    assert entries == TOP_LEVEL
    for name in TOP_LEVEL - {"__init__.py"}:
        doc = ast.get_docstring(ast.parse((ROOT / "nest_cp" / name / "__init__.py").read_text(
            encoding="utf-8")))
        assert doc and len(doc.splitlines()) >= 3, f"nest_cp/{name}/__init__.py is undocumented"


def test_core_imports_no_backend_or_harness():
    """Importing the model, cost model and evaluator loads nothing of dp or verify."""
    code = ("import nest_cp.cost.evaluate, nest_cp.model.instance, nest_cp.cost.terms, sys; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dp', 'verify') "
            "or m.startswith(('nest_cp.dp', 'nest_cp.verify', 'nest_cp.solvers', "
            "'nest_cp.harness', 'nest_cp.cli'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT.parent).stdout
    assert out.strip() == "[]"


def test_distribution_installs_one_top_level_name():
    """pyproject maps dp/ and verify/ under nest_cp, so the wheel adds only nest_cp."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = config["tool"]["setuptools"]
    assert {name.split(".")[0] for name in setuptools["packages"]} == {"nest_cp"}
    assert setuptools["package-dir"]["nest_cp.dp"] == "dp"
    assert setuptools["package-dir"]["nest_cp.verify"] == "verify"
    listed = set(setuptools["packages"])
    for module, file in _modules().items():  # every package folder is listed
        if file.name == "__init__.py":
            assert module in listed, f"{module} is not installed"
    assert Path(nest_cp.__file__).parent == ROOT / "nest_cp"
