"""What `make lint`'s lint-imports does not check: pyproject's [tool.importlinter] contracts catch a
planted upward import or cycle and have no exception, no module names a higher layer's module in
a string (importlib, `python -m`), which import-linter does not see, and no `from OUR.MODULE import
NAME` anywhere in the repository (benchmarks and tests included, which neither the type check nor
the default suite imports) names something that module no longer has."""

from __future__ import annotations

import ast
import functools
import re
import tomllib
from importlib.util import find_spec
from pathlib import Path

import grimp
import pytest
from importlinter.configuration import configure
from importlinter.contracts.acyclic_siblings import AcyclicSiblingsContract
from importlinter.contracts.layers import LayersContract

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
configure()  # import-linter's settings (its timer) that the contracts read
KINDS = {"layers": LayersContract, "acyclic_siblings": AcyclicSiblingsContract}


def _contract(contract_id: str):
    (spec,) = [c for c in CONFIG["contracts"] if c["id"] == contract_id]
    options = {k: v for k, v in spec.items() if k not in ("id", "name", "type")}
    return KINDS[spec["type"]](name=spec["name"], session_options={}, contract_options=options)


@pytest.fixture
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(
        *CONFIG["root_packages"],
        cache_dir=None,
        exclude_type_checking_imports=CONFIG.get("exclude_type_checking_imports", False),
    )


def _broken(contract, graph) -> str:
    check = contract.check(graph, verbose=False)
    return "" if check.kept else str(check.metadata)


def test_an_upward_import_breaks_the_layers(graph) -> None:
    # What mixtures/build.py did before (reading eval sets through evals.sets).
    graph.add_import(
        importer="mixtures.build", imported="evals.sets", line_number=1, line_contents=""
    )
    broken = _broken(_contract("layers"), graph)
    assert "mixtures.build" in broken and "evals.sets" in broken


def test_a_cycle_inside_a_package_breaks_acyclicity(graph) -> None:
    # What evals/ablation_plan.py did before (its command handler imported evals.ablation_run, which imports it).
    graph.add_import(
        importer="evals.ablation_plan",
        imported="evals.ablation_run",
        line_number=1,
        line_contents="",
    )
    assert "evals" in _broken(_contract("acyclic"), graph)


def test_the_layers_contract_has_no_exception() -> None:
    (layers,) = [c for c in CONFIG["contracts"] if c["id"] == "layers"]
    assert layers["layers"][0] == "pretrain_app" and "ignore_imports" not in layers
    assert set(layers["layers"]) == set(CONFIG["root_packages"])


def _layer_of(name: str) -> int | None:
    (layers,) = [c["layers"] for c in CONFIG["contracts"] if c["id"] == "layers"]
    top = name.split(".")[0]
    return len(layers) - layers.index(top) if top in layers else None


def upward_strings(package: str, source: str) -> list[str]:
    """Strings in `source` (a module of `package`) that name a module of a higher layer: an
    `importlib` reference `pkg.mod` / `pkg.mod:attr`, or a `python -m pkg` argument."""
    own = _layer_of(package) or 0
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            ref = node.value.split(":")[0]
            if re.fullmatch(r"[a-z_]+(\.[a-z_]+)+", ref) or ref != node.value:
                names.append(ref)
        if isinstance(node, ast.List | ast.Tuple):
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            names += [b for a, b in zip(items, items[1:]) if a == "-m" and isinstance(b, str)]
        found += [n for n in names if (_layer_of(n) or 0) > own and _is_module(n)]
    return found


def _is_module(name: str) -> bool:
    try:
        return find_spec(name) is not None
    except ModuleNotFoundError:  # a file name such as "tokenizer.json"
        return False


def test_no_module_names_a_higher_layer_in_a_string() -> None:
    found = {}
    for package in CONFIG["root_packages"]:
        for path in sorted((ROOT / package).rglob("*.py")):
            hits = upward_strings(package, path.read_text())
            if hits:
                found[str(path.relative_to(ROOT))] = hits
    assert found == {}


@pytest.mark.parametrize(
    ("package", "source", "expected"),
    [
        ("pretrain", 'STEPS = (("eval", "evals.ablation_run:run_sweep"),)', ["evals.ablation_run"]),
        ("data_pipeline", 'importlib.import_module("tokenizer.encode")', ["tokenizer.encode"]),
        ("trainer", 'argv = [sys.executable, "-m", "pretrain_app", "launch"]', ["pretrain_app"]),
        ("evals", 'argv = [sys.executable, "-m", "trainer", "launch"]', []),
        ("pretrain_app", 'STEPS = (("eval", "evals.ablation_run:run_sweep"),)', []),
    ],
)
def test_a_planted_upward_string_is_found(package, source, expected) -> None:
    assert upward_strings(package, source) == expected


OURS = (*CONFIG["root_packages"], "benchmarks", "tests", "tools")


def _module_file(root: Path, name: str) -> Path | None:
    base = root.joinpath(*name.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py"), base):
        if path.exists():
            return path
    return None


@functools.cache
def _top_level_names(path: Path) -> set[str]:
    """The names a module binds at its top level (in `if` / `try` / `with` blocks too)."""
    names: set[str] = set()

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.If | ast.Try | ast.With):
                for block in ("body", "orelse", "finalbody"):
                    walk(getattr(node, block, []))
                for handler in getattr(node, "handlers", []):
                    walk(handler.body)

    if path.is_file():
        walk(ast.parse(path.read_text(encoding="utf-8")).body)
    return names


def stale_imports(root: Path) -> list[str]:
    """`file:line: module has no NAME` for each from-import of one of our modules that names
    neither a top-level binding of that module nor a submodule of it (and each import of a
    module that does not exist)."""
    found = []
    for path in sorted(p for package in OURS for p in (root / package).rglob("*.py")):
        rel = path.relative_to(root)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] not in OURS:
                    continue
                module = _module_file(root, node.module)
                if module is None:
                    found.append(f"{rel}:{node.lineno}: no module {node.module}")
                    continue
                names = _top_level_names(module)
                for alias in node.names:
                    submodule = _module_file(root, f"{node.module}.{alias.name}")
                    if alias.name != "*" and alias.name not in names and submodule is None:
                        found.append(f"{rel}:{node.lineno}: {node.module} has no {alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    if top in OURS and _module_file(root, alias.name) is None:
                        found.append(f"{rel}:{node.lineno}: no module {alias.name}")
    return found


def test_every_import_of_our_modules_names_what_they_have() -> None:
    assert stale_imports(ROOT) == []


def test_a_planted_stale_import_is_found(tmp_path: Path) -> None:
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "launch.py").write_text("def launch():\n    pass\nMODE = 1\n")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "bench.py").write_text(
        "from trainer.launch import MODE, launch\n"
        "from trainer.launch import _verify_mode\n"
        "import trainer.gone\n"
    )
    assert stale_imports(tmp_path) == [
        "benchmarks/bench.py:2: trainer.launch has no _verify_mode",
        "benchmarks/bench.py:3: no module trainer.gone",
    ]
