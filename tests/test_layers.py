"""The package graph has no upward arrow and no cycle inside a package (pyproject's
[tool.importlinter] contracts, checked on the real import graph), and planting either breaks it."""

from __future__ import annotations

import tomllib
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
    return grimp.build_graph(*CONFIG["root_packages"], cache_dir=None)


def _broken(contract, graph) -> str:
    check = contract.check(graph, verbose=False)
    return "" if check.kept else str(check.metadata)


@pytest.mark.parametrize("contract_id", [c["id"] for c in CONFIG["contracts"]])
def test_the_package_graph_keeps_its_contracts(graph, contract_id) -> None:
    assert _broken(_contract(contract_id), graph) == ""


def test_an_upward_import_breaks_the_layers(graph) -> None:
    # What mixtures/build.py did before (reading eval sets through evals.sets).
    graph.add_import(
        importer="mixtures.build", imported="evals.sets", line_number=1, line_contents=""
    )
    broken = _broken(_contract("layers"), graph)
    assert "mixtures.build" in broken and "evals.sets" in broken


def test_a_cycle_inside_a_package_breaks_acyclicity(graph) -> None:
    # What evals/ablate.py did before (its command handler imported evals.sweep, which imports it).
    graph.add_import(
        importer="evals.ablate", imported="evals.sweep", line_number=1, line_contents=""
    )
    assert "evals" in _broken(_contract("acyclic"), graph)
