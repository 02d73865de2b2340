"""The default tier (`python -m pytest`: every test not marked slow; pyproject.toml says the rule) keeps tests of
every room of the suite: the control plane, the simulator's clock, each door (the CLI and the API), the hostile
inputs. A change that marks a whole room slow fails here, as does one that drops the default's deselection.

In a run that collected the whole suite the room count is read off that session's own collection (free); run
alone, this test collects the rooms in a pytest of its own (seconds)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from tests.helpers.tiers import COLLECTED

REPO = Path(__file__).resolve().parents[1]
ROOMS = [
    "tests/engine/core",  # the control plane
    "tests/engine/specs",
    "tests/sim/core",  # the simulator and its clock
    "tests/calibrate",  # the cost models that clock it
    "tests/sim/experiment", "tests/sim/workload", "tests/sim/capacity", "tests/sim/reproduce", "tests/fidelity",
    "tests/benchmarks",
    "tests/test_api.py", "tests/test_api_arguments.py", "tests/test_api_fuzz.py",  # the API
    "tests/test_user_errors.py", "tests/sim/test_hostile_inputs.py",  # the CLI, and what it refuses
    "tests/sim/test_hostile_surfaces.py", "tests/sim/test_surface_fuzz.py",
]
if importlib.util.find_spec("torch") is not None:  # these skip whole without it
    ROOMS += ["tests/engine/runtime", "tests/engine/kernels"]


def room_of(path: str) -> str | None:
    return next((room for room in ROOMS if path == room or path.startswith(room + "/")), None)


def default_tier_from(items: list) -> set[str]:
    return {room for item in items if item.get_closest_marker("slow") is None
            and (room := room_of(Path(item.path).relative_to(REPO).as_posix()))}


def default_tier_collected() -> set[str]:
    """The rooms the default command's own selection (addopts' -m) holds, collected in a pytest of its own."""
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             *ROOMS], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    # -q twice (addopts' and ours): one "path: count" line per file with a test selected
    return {room for line in result.stdout.splitlines() if ": " in line and (room := room_of(line.split(": ")[0]))}


def test_the_default_command_leaves_out_the_slow_tier_and_only_it(pytestconfig):
    addopts = pytestconfig.getini("addopts")
    assert addopts[addopts.index("-m") + 1] == "not slow"
    assert any(line.startswith("slow:") for line in pytestconfig.getini("markers"))


def test_every_room_keeps_tests_in_the_default_tier(request):
    collected = request.config.stash.get(COLLECTED, [])
    seen = {room_of(Path(item.path).relative_to(REPO).as_posix()) for item in collected}
    rooms = default_tier_from(collected) if seen >= set(ROOMS) else default_tier_collected()
    assert sorted(set(ROOMS) - rooms) == [], "rooms with no test left in the default tier"
