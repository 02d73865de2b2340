"""The rooms' import rules hold: sim -> calibrate -> engine, never upward, and the control plane is pure.

`engine` imports none of `sim`, `calibrate`, `fidelity`; `engine/core` imports none of torch, numpy,
yaml; `calibrate` imports neither `sim` nor `fidelity`; `sim` never reaches the real engine
(`engine.runtime`, `engine.kernels`) nor `fidelity`. `fidelity` is the one room that imports both data
planes. The front door, `servesim`, sits above them all and registers every room's commands: no room
imports it. Checked twice: by reading every import statement in the source (anywhere in a file: top
level, inside functions, under `if TYPE_CHECKING:`), and by importing the modules in a fresh
interpreter and looking at what came along. A module's `if __name__ == "__main__":` block is the
program, not the module (it never runs on an import), so the scan leaves it out.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.import_scan import REPO, imported_modules, module_name

ENGINE = REPO / "engine"
CORE = ENGINE / "core"

# the installed package; research/ and benchmarks/ sit outside it and above it
PRODUCT = ("engine", "calibrate", "sim", "fidelity", "servesim")

FORBIDDEN = [  # (folder, modules (and their submodules) no file under it may import)
    (ENGINE, {"sim", "calibrate", "fidelity", "servesim"}),
    (CORE, {"torch", "numpy", "yaml", "triton"}),
    (REPO / "calibrate", {"sim", "fidelity", "servesim"}),
    (REPO / "sim", {"fidelity", "engine.runtime", "engine.kernels", "torch", "triton", "servesim"}),
    (REPO / "fidelity", {"servesim"}),
    # a real run's replay runs no engine: the simulator's side only, anywhere
    (REPO / "fidelity" / "runs", {"torch", "triton", "engine.runtime", "engine.kernels", "servesim"}),
]


def violations(folder: Path, banned: set[str]) -> list[str]:
    bad = []
    for path in sorted(folder.rglob("*.py")):
        names = imported_modules(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")
        where = str(path.relative_to(REPO))
        for name in sorted(names):
            hit = any(name == b or name.startswith(b + ".") for b in banned)
            if hit:
                bad.append(f"{where} imports {name}")
    return bad


def test_the_scan_sees_every_kind_of_import():
    source = ("import os\n"
              "from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from sim.experiment.config import Experiment\n"
              "def f():\n    import torch.nn as nn\n    from numpy import zeros\n"
              "class C:\n    def g(self):\n        from .. import errors\n")
    names = imported_modules(source, "engine.core.scheduler.vllm")
    assert {"sim.experiment.config", "torch.nn", "numpy", "engine.core.errors"} <= names


def test_the_scan_leaves_out_only_a_top_level_main_block():
    source = ("import os\n"
              "def f():\n    if __name__ == '__main__':\n        import numpy\n"
              "if __name__ == '__main__':\n    from servesim.cli import main\n"
              "if __name__ != '__main__':\n    import torch\n")
    names = imported_modules(source, "sim.cli")
    assert "servesim.cli" not in names and {"os", "numpy", "torch"} <= names


@pytest.mark.parametrize("folder,banned", FORBIDDEN,
                         ids=["engine-not-upward", "core-pure-python", "calibrate-not-sim", "sim-not-real-engine",
                              "fidelity-not-front-door", "real-runs-not-real-engine"])
def test_no_source_file_breaks_the_rule(folder, banned):
    files = list(folder.rglob("*.py"))
    assert len(files) > 4, f"found only {len(files)} files under {folder}"
    assert violations(folder, banned) == []


def _import_in_a_fresh_interpreter(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_importing_the_control_plane_brings_no_tensor_or_yaml_library():
    modules = sorted(module_name(p) for p in CORE.rglob("*.py"))
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n    importlib.import_module(name)\n"
            "bad = [m for m in ('torch', 'triton', 'numpy', 'yaml', 'sim', 'calibrate') if m in sys.modules]\n"
            "assert not bad, bad\n"
            "print(len([m for m in sys.modules if m.startswith('engine.core')]))\n")
    result = _import_in_a_fresh_interpreter(code)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= len(modules) - 1  # every module really imported


def test_importing_the_engine_brings_neither_simulator_nor_calibration():
    modules = sorted(module_name(p) for p in ENGINE.rglob("*.py"))
    code = ("import importlib, sys\n"
            "skipped = []\n"
            f"for name in {modules!r}:\n"
            "    try:\n        importlib.import_module(name)\n"
            "    except ImportError as e:\n"
            "        if e.name not in ('torch', 'triton'):\n            raise\n"
            "        skipped.append(name)\n"
            "bad = [m for m in ('sim', 'calibrate') if m in sys.modules]\n"
            "assert not bad, bad\n")
    result = _import_in_a_fresh_interpreter(code)
    assert result.returncode == 0, result.stderr


def test_no_room_imports_the_front_door():
    """servesim/ sits on top: the CLI and the Python API import the rooms, never the other way round."""
    # benchmarks/ and research/ sit above the front door too: their scripts use the API as a user would
    rooms = [p for p in REPO.iterdir()
             if (p / "__init__.py").exists() and p.name not in ("servesim", "benchmarks", "research")]
    assert {"engine", "sim", "calibrate", "fidelity"} <= {p.name for p in rooms}
    assert [v for room in rooms for v in violations(room, {"servesim"})] == []


@pytest.mark.parametrize("room", PRODUCT)
def test_the_product_never_imports_the_research(room):
    """research/ and benchmarks/ are not installed (pyproject.toml's packages): a product module that imported
    them would work in this checkout and fail in a wheel."""
    assert violations(REPO / room, {"research", "benchmarks"}) == []


def test_the_calibrate_commands_load_no_research():
    code = ("import sys\n"
            "import calibrate.cli, calibrate.judging.op_import, calibrate.judging.bundle_report, servesim.cli\n"
            "import calibrate.judging.transfer_judge, calibrate.cost_models.carry_file\n"
            "servesim.cli.build_parser()\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('research', 'benchmarks')]\n"
            "assert not bad, bad\n")
    result = _import_in_a_fresh_interpreter(code)
    assert result.returncode == 0, result.stderr


def test_importing_the_front_door_loads_no_room_until_it_is_used():
    code = ("import sys, servesim\n"
            "heavy = ('torch', 'numpy', 'pandas', 'simpy', 'sim', 'calibrate', 'fidelity')\n"
            "bad = [m for m in heavy if m in sys.modules]\n"
            "assert not bad, bad\n"
            "assert callable(servesim.run) and servesim.__all__\n")
    result = _import_in_a_fresh_interpreter(code)
    assert result.returncode == 0, result.stderr


def test_the_command_line_loads_neither_torch_nor_the_simulator():
    code = ("import sys, servesim.cli\n"
            "servesim.cli.build_parser()\n"
            "bad = [m for m in ('torch', 'simpy', 'pandas') if m in sys.modules]\n"
            "assert not bad, bad\n")
    result = _import_in_a_fresh_interpreter(code)
    assert result.returncode == 0, result.stderr


def test_validating_a_real_run_imports_no_torch(tmp_path):
    """`servesim validate --run`, end to end, in an interpreter where importing torch fails."""
    from tests.helpers.real_runs import write_bench_run

    run = write_bench_run(tmp_path)
    code = ("import sys\n"
            "sys.modules['torch'] = None  # an import of torch now raises ImportError\n"
            "from servesim.cli import main\n"
            f"status = main(['validate', '--run', {str(run)!r}, '--out', {str(tmp_path / 'out')!r}])\n"
            "bad = [m for m in ('triton', 'engine.runtime.engine') if m in sys.modules]\n"
            "assert status == 0 and not bad, (status, bad)\n")
    result = _import_in_a_fresh_interpreter(code)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "run.json").is_file()
