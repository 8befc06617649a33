"""The import rules of issue 26: each layer imports only itself and the layers below.

Lowest first: protocol < storage < server < settings < cli, and protocol < client <
spark / operator. The contracts live in pyproject.toml (``[tool.importlinter]``) so
that ``lint-imports`` and this test check the same thing; each contract is its own
test, so a failure names the rule and import-linter's report shows the import chain.
The module cycle check is separate because it must list every cycle, with no ignores.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import grimp
import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
ROOT_PACKAGES = ("plateau", "plateau_operator")


def _config() -> dict[str, Any]:
    with PYPROJECT.open("rb") as f:
        config: dict[str, Any] = tomllib.load(f)["tool"]["importlinter"]
    return config


def _contract_ids() -> list[str]:
    return [str(contract["id"]) for contract in _config()["contracts"]]


@pytest.mark.parametrize("contract", _contract_ids())
def test_contract_is_kept(contract: str) -> None:
    exit_code = lint_imports(
        config_filename=str(PYPROJECT),
        limit_to_contracts=(contract,),
        no_cache=True,
        no_logo=True,
    )
    assert exit_code == 0, f"import contract {contract!r} broken: see the report above"


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work: list[tuple[str, int]] = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_no_module_import_cycles() -> None:
    graph = grimp.build_graph(*ROOT_PACKAGES, cache_dir=None)
    cycles = _cycles(graph)
    assert not cycles, "modules that import each other (directly or in a ring):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_cycle_finder_sees_a_ring() -> None:
    """The check above only means something if it would find a cycle."""
    graph = grimp.ImportGraph()
    for importer, imported in (("a.x", "a.y"), ("a.y", "a.z"), ("a.z", "a.x"), ("a.z", "a.w")):
        graph.add_import(importer=importer, imported=imported)
    assert _cycles(graph) == [["a.x", "a.y", "a.z"]]


def test_every_top_level_module_has_a_layer() -> None:
    """A new module under plateau must be placed in the layers, or it escapes every rule."""
    placed: set[str] = set()
    for contract in _config()["contracts"]:
        for layer in contract.get("layers", []):
            placed.update(name.strip() for name in layer.replace(":", "|").split("|"))
    graph = grimp.build_graph("plateau", cache_dir=None)
    children = graph.find_children("plateau")
    assert children, "grimp found no modules under plateau"
    assert sorted(children - placed) == []
