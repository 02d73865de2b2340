"""No module of the tree imports itself round a circle, and inside sim/ and calibrate/ imports go one way.

The graph holds every module outside tests/ (engine, calibrate, sim, fidelity, servesim, benchmarks, the rest), an
edge for every import statement that names another of them, read as tests/test_import_rules.py reads them:
anywhere in a file (top level, inside functions, under `if TYPE_CHECKING:`), a top-level `if __name__ ==
"__main__":` block left out. A circle (modules that each reach the others) is named with one path round it.

Inside sim/ each room sits in a layer (SIM_LAYERS) and imports its own room or the layers below, never one above:
what two rooms share lives in the lower one. Inside calibrate/ each subfolder sits in a layer (CALIBRATE_LAYERS) the
same way, and the commands (calibrate.cli, calibrate.host_cli) are imported by no other module of the room.
"""
from __future__ import annotations

import ast
import os
from collections import deque
from pathlib import Path

import pytest

from tests.helpers.import_scan import REPO, module_name, without_main_blocks

# not the tree's modules: the tests themselves, virtual environments, and what builds, docs and runs write
SKIPPED = {"tests", "build", "site", "results"}

SIM_LAYERS = (  # lowest first: a module of sim/ imports its own room or a lower layer
    ("workload",),  # workloads, datasets, arrival processes, traces
    ("core",),  # the simulation: replicas, fast-forward, the router, fleets, the records they write
    ("executors",),  # where work runs: this process, a process pool, Dask; a fleet's replicas in several processes
    ("experiment",),  # configs, one run, sweeps, fingerprints, outputs, metrics, plots
    ("capacity", "reproduce"),  # questions answered by running experiments; neither imports the other
    ("commands",),  # each room's command line, sim/<room>/cli.py
    ("sim.cli",),  # registers every room's commands; the front door (servesim/cli.py) calls it
)
CALIBRATE_LAYERS = (  # lowest first: a module of calibrate/ imports its own subfolder or a lower layer
    ("hardware", "work", "maths"),  # spec sheets and number formats; an iteration's work counted; NNLS, the bent roof
    ("tables",),  # public measurement tables read into rows
    ("parts",),  # each part of an iteration priced: matmuls, attention, all-reduce, experts, host, carried by regime
    ("clock",),  # the CostModel contract, the breakdown, the spec-sheet roofline
    ("profiling",),  # timing the real engine
    ("fitting",),  # the fits and the profile file they make
    ("judging",),  # the transfer judged on GPUs and models a fit never saw; the import of per-operation tables
    ("cost_models",),  # the profile and transfer cost models, and the registry that builds any of them
    ("commands",),  # `calibrate host` and `calibrate show` of a host model, calibrate/host_cli.py
    ("calibrate.cli",),  # `servesim calibrate`: registers the host commands; the front door (servesim/cli.py) calls it
)
CALIBRATE_COMMANDS = {"calibrate.cli", "calibrate.host_cli"}


def tree_files(root: Path = REPO) -> list[Path]:
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(s for s in subfolders if s not in SKIPPED and not s.startswith("."))
        found.extend(Path(folder, name) for name in files if name.endswith(".py"))
    return sorted(found)


def in_tree(name: str, modules: set[str] | dict[str, Path]) -> str | None:
    """The module of the tree that an imported name is, or is defined in (None: it is from outside)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imported_from_tree(source: str, module: str, is_package: bool, modules: set[str] | dict[str, Path]) -> set[str]:
    """The modules of the tree that `source`'s import statements import (as tests/helpers/import_scan.py
    reads them). `from package import name` imports the submodule where `name` is one, else the package."""
    found = set()
    for node in ast.walk(without_main_blocks(ast.parse(source))):
        if isinstance(node, ast.Import):
            found.update(in_tree(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")
                package = package[:len(package) - node.level + (1 if is_package else 0)]
                base = ".".join(package + ([base] if base else []))
            found.update(in_tree(base if alias.name == "*" else f"{base}.{alias.name}", modules)
                         for alias in node.names)
    return {target for target in found if target is not None and target != module}


def import_graph(files: list[Path]) -> dict[str, set[str]]:
    """Each module's name -> the other modules of the tree it imports."""
    modules = {module_name(path): path for path in files}
    return {name: imported_from_tree(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", modules)
            for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of two or more modules that each reach all the others (a strongly connected component, Tarjan's
    algorithm, without recursion), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in graph:
                    continue
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
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
    return sorted(found)


def path_round(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One circle through the component's first module, as the imports go: [a, b, ..., a] (shortest first)."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(graph[node] & members):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if target not in came_from:
                came_from[target] = node
                queue.append(target)
    raise ValueError(f"{component} is not a circle of the graph")


def describe(graph: dict[str, set[str]], component: list[str]) -> str:
    return f"circle of {len(component)}: {' -> '.join(path_round(graph, component))} (all: {', '.join(component)})"


def room_of(module: str, top: str) -> str:
    """The room a module of a top-level package belongs to: its subfolder, or "commands" for a command line (a
    room of its own: sim's `*.cli` modules, calibrate's top-level modules); the package's own cli is `top.cli`."""
    parts = module.split(".")
    if module == f"{top}.cli":
        return module
    if top == "sim":
        return "commands" if parts[-1] == "cli" else parts[1]
    return "commands" if len(parts) == 2 else parts[1]


def layer_of(module: str, top: str, layers: tuple[tuple[str, ...], ...]) -> tuple[int, str]:
    """A module's layer in `layers` (lowest first) and its room; a command line is a room of its own."""
    room = room_of(module, top)
    for layer, rooms in enumerate(layers):
        if room in rooms:
            return layer, (module if room == "commands" else room)
    raise ValueError(f"{module}: its room {room!r} is in no layer of {top}'s layers; add it where it belongs")


def layer_violations(graph: dict[str, set[str]], top: str, layers: tuple[tuple[str, ...], ...]) -> list[str]:
    """Every import inside `top` from one room into another that is not a layer below."""
    bad, prefix = [], f"{top}."
    for module in sorted(m for m in graph if m.startswith(prefix)):
        layer, room = layer_of(module, top, layers)
        for target in sorted(t for t in graph[module] if t.startswith(prefix)):
            target_layer, target_room = layer_of(target, top, layers)
            if target_room != room and target_layer >= layer:
                bad.append(f"{module} ({'/'.join(layers[layer])}) imports {target} "
                           f"({'/'.join(layers[target_layer])}): not a layer below")
    return bad


def sim_layer_violations(graph: dict[str, set[str]]) -> list[str]:
    return layer_violations(graph, "sim", SIM_LAYERS)


def calibrate_layer_violations(graph: dict[str, set[str]]) -> list[str]:
    return layer_violations(graph, "calibrate", CALIBRATE_LAYERS)


def calibrate_violations(graph: dict[str, set[str]]) -> list[str]:
    return [f"{module} imports the command line's {target}" for module in sorted(graph)
            if module.startswith("calibrate.") and module not in CALIBRATE_COMMANDS
            for target in sorted(graph[module] & CALIBRATE_COMMANDS)]


GRAPH = import_graph(tree_files())


def test_the_graph_holds_every_room_and_its_function_level_imports():
    rooms = {module.split(".")[0] for module in GRAPH}
    assert {"engine", "calibrate", "sim", "fidelity", "servesim", "benchmarks"} <= rooms
    assert "servesim.cli" not in GRAPH["sim.cli"]  # the main block's import is left out
    assert {"sim.capacity.cli", "sim.reproduce.cli"} <= GRAPH["sim.cli"]  # imported inside register()
    assert not [module for module in GRAPH if module.startswith("tests")]


def test_the_tree_has_no_import_circle():
    found = circles(GRAPH)
    assert not found, "\n".join(describe(GRAPH, component) for component in found)


def test_inside_sim_imports_go_down_the_layers():
    assert len([m for m in GRAPH if m.startswith("sim.")]) > 50
    assert sim_layer_violations(GRAPH) == []


def test_inside_calibrate_imports_go_down_the_layers():
    assert len([m for m in GRAPH if m.startswith("calibrate.")]) > 40
    assert calibrate_layer_violations(GRAPH) == []


def test_inside_calibrate_only_the_commands_import_the_commands():
    assert CALIBRATE_COMMANDS <= set(GRAPH)
    assert calibrate_violations(GRAPH) == []


# --- the checks themselves, on graphs made up to fail them ---------------------------------------------------------
def test_the_finder_finds_each_circle_and_a_path_round_it():
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set(), "e": {"a", "f"}, "f": {"e"}, "g": {"g2"},
             "g2": set()}
    assert circles(graph) == [["a", "b", "c"], ["e", "f"]]
    assert path_round(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert describe(graph, ["e", "f"]) == "circle of 2: e -> f -> e (all: e, f)"
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_a_long_chain_closing_on_itself_is_one_circle():
    names = [f"m{i:04d}" for i in range(3000)]  # deeper than Python's recursion limit
    graph = {name: {names[(i + 1) % len(names)]} for i, name in enumerate(names)}
    assert circles(graph) == [sorted(names)]


def test_an_imported_name_is_the_module_it_comes_from():
    modules = {"sim.core", "sim.core.simulate", "sim.core.beams", "sim.core.replica", "engine.core.serving"}
    assert in_tree("sim.core.simulate.simulate", modules) == "sim.core.simulate"
    assert in_tree("sim.core.engine_name", modules) == "sim.core"
    assert in_tree("numpy.random", modules) is None
    source = ("import numpy\n"
              "from . import beams, compiled\n"  # a submodule, and a name of the package
              "from engine.core.serving import Step\n"
              "def f():\n    from sim.core.simulate import simulate\n"
              "if __name__ == '__main__':\n    import sim.core.replica\n")
    assert imported_from_tree(source, "sim.core.fleet", False, modules) == {
        "sim.core.beams", "sim.core", "engine.core.serving", "sim.core.simulate"}


def test_an_upward_import_in_sim_and_an_import_of_calibrates_commands_are_named():
    graph = {"sim.core.replica": {"sim.experiment.run", "sim.core.alarm", "sim.workload.trace"},
             "sim.experiment.run": {"sim.core.replica"}, "sim.capacity.plan": {"sim.reproduce.table"},
             "sim.capacity.cli": {"sim.cli", "sim.capacity.plan"}, "sim.cli": {"sim.capacity.cli"},
             "sim.core.alarm": set(), "sim.workload.trace": set(), "sim.reproduce.table": set()}
    assert sim_layer_violations(graph) == [
        "sim.capacity.cli (commands) imports sim.cli (sim.cli): not a layer below",
        "sim.capacity.plan (capacity/reproduce) imports sim.reproduce.table (capacity/reproduce): not a layer below",
        "sim.core.replica (core) imports sim.experiment.run (experiment): not a layer below"]
    graph = {"calibrate.fitting.fit": {"calibrate.host_cli"}, "calibrate.cli": {"calibrate.host_cli"},
             "calibrate.host_cli": set()}
    assert calibrate_violations(graph) == ["calibrate.fitting.fit imports the command line's calibrate.host_cli"]


def test_an_upward_import_in_calibrate_is_named():
    graph = {"calibrate.clock.roofline": {"calibrate.fitting.op_fit", "calibrate.parts.host",
                                          "calibrate.clock.breakdown"},
             "calibrate.fitting.op_fit": {"calibrate.clock.roofline"},
             "calibrate.tables.op_table": {"calibrate.maths.nnls"},
             "calibrate.hardware.precision": {"calibrate.hardware.hardware", "calibrate.work.layer_ops"},
             "calibrate.host_cli": {"calibrate.cli"}, "calibrate.cli": {"calibrate.host_cli", "calibrate.fitting.fit"}}
    assert calibrate_layer_violations(graph) == [
        "calibrate.clock.roofline (clock) imports calibrate.fitting.op_fit (fitting): not a layer below",
        "calibrate.hardware.precision (hardware/work/maths) imports calibrate.work.layer_ops (hardware/work/maths): "
        "not a layer below",
        "calibrate.host_cli (commands) imports calibrate.cli (calibrate.cli): not a layer below"]


def test_a_module_of_calibrate_in_no_layer_is_named():
    with pytest.raises(ValueError, match="calibrate.tools.helper: its room 'tools' is in no layer"):
        layer_of("calibrate.tools.helper", "calibrate", CALIBRATE_LAYERS)


def test_a_module_of_sim_in_no_layer_is_named():
    with pytest.raises(ValueError, match="sim.tools.helper: its room 'tools' is in no layer"):
        layer_of("sim.tools.helper", "sim", SIM_LAYERS)
