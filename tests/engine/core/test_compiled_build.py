"""engine/core/compiled.py: which build runs, SERVESIM_PURE_PYTHON=1, and a stale compiled build never used.

The rule (docs/compiled.md): a compiled module whose source changed since the build, or is gone, or an
extension no build recorded, and the whole control plane runs as pure Python, with one warning saying how to
rebuild. The checks on a copied tree need no compiler: they only look at which files exist and what the
sources hold. The end-to-end ones run against this checkout's compiled build, where there is one.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core import compiled
from engine.core.compiled import MANIFEST, PURE_ENV, is_compiled, stale_reason

REPO = Path(__file__).resolve().parents[3]
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _tree(tmp_path: Path, sources: dict[str, str], record: bool = True) -> Path:
    """A fake installed build: sources, an empty 'extension' beside each, and the build's record."""
    for name, text in sources.items():
        source = tmp_path.joinpath(*name.split(".")).with_suffix(".py")
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(text)
        source.with_suffix(SUFFIX).write_bytes(b"")
    (tmp_path / "engine" / "core" / f"native__mypyc{SUFFIX}").write_bytes(b"")
    if record:
        digests = {name: hashlib.sha256(text.encode()).hexdigest() for name, text in sources.items()}
        (tmp_path / "engine" / "core" / MANIFEST).write_text(json.dumps({"modules": digests}))
    return tmp_path


SOURCES = {"engine.core.batch": "x = 1\n", "engine.core.scheduler.vllm": "y = 2\n", "sim.core.replica": "z = 3\n"}


def test_a_build_of_these_very_sources_is_current(tmp_path):
    assert stale_reason(_tree(tmp_path, SOURCES)) is None


def test_no_build_at_all_is_not_stale(tmp_path):
    (tmp_path / "engine" / "core").mkdir(parents=True)
    (tmp_path / "engine" / "core" / "batch.py").write_text("x = 1\n")
    assert stale_reason(tmp_path) is None


def test_an_edited_source_makes_the_build_stale(tmp_path):
    root = _tree(tmp_path, SOURCES)
    (root / "engine" / "core" / "scheduler" / "vllm.py").write_text("y = 3  # edited, not rebuilt\n")
    assert stale_reason(root) == "engine/core/scheduler/vllm.py changed since the compiled build"


def test_a_removed_source_or_extension_makes_the_build_stale(tmp_path):
    root = _tree(tmp_path, SOURCES)
    (root / "sim" / "core" / "replica.py").unlink()
    assert stale_reason(root) == "sim/core/replica.py is gone since the compiled build"
    root = _tree(tmp_path / "b", SOURCES)
    (root / "engine" / "core" / f"batch{SUFFIX}").unlink()
    assert stale_reason(root) == "the compiled engine.core.batch is gone"


def test_an_extension_no_build_recorded_is_stale(tmp_path):
    root = _tree(tmp_path, SOURCES)
    (root / "engine" / "core" / f"system{SUFFIX}").write_bytes(b"")  # left by an earlier build
    assert stale_reason(root) == f"engine/core/system{SUFFIX} is not of the compiled build"
    bare = _tree(tmp_path / "b", SOURCES, record=False)
    assert "compiled modules have no _compiled.json" in stale_reason(bare)


def _python(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    environ.update(PYTHONPATH=str(cwd), **env)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=environ, capture_output=True, text=True,
                          timeout=120)


# calibrate's compiled module first: its package's __init__ must have chosen the build before it is found
WHERE = ("import calibrate.clock.roofline_terms as d, engine.core.serving as a, engine.core.scheduler.vllm as b, "
         "sim.core.replica as c, engine.core as e; "
         "print(e.compiled.BUILD); print(a.__file__); print(b.__file__); print(c.__file__); print(d.__file__)")


def test_the_environment_variable_loads_every_module_from_its_source():
    result = _python(WHERE, REPO, **{PURE_ENV: "1"})
    assert result.returncode == 0, result.stderr
    build, *files = result.stdout.splitlines()
    assert build == f"pure Python ({PURE_ENV}=1)"
    assert all(f.endswith(".py") for f in files), files
    assert "warning" not in result.stderr.lower(), result.stderr


def test_servesim_version_says_which_build_runs():
    result = subprocess.run([sys.executable, "-m", "servesim", "--version"], cwd=REPO, capture_output=True,
                            text=True, timeout=120, env={**os.environ, PURE_ENV: "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("servesim ") and f"control plane: pure Python ({PURE_ENV}=1)" in result.stdout


needs_a_build = pytest.mark.skipif(not is_compiled(), reason="no compiled build in this checkout (pip install -e . "
                                   "with a C compiler builds one; CI does)")


def _copy_of_the_build(tmp_path: Path) -> Path:
    """engine/, sim/, calibrate/ as this checkout has them, extensions and record included."""
    for room in ("engine", "sim", "calibrate"):
        shutil.copytree(REPO / room, tmp_path / room, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


@needs_a_build
def test_the_compiled_build_runs_where_it_is_current(tmp_path):
    result = _python(WHERE, _copy_of_the_build(tmp_path))
    assert result.returncode == 0, result.stderr
    build, *files = result.stdout.splitlines()
    assert build == compiled.COMPILED
    assert not any(f.endswith(".py") for f in files), files


@needs_a_build
def test_an_edited_source_runs_as_pure_python_with_one_warning(tmp_path):
    root = _copy_of_the_build(tmp_path)
    with open(root / "engine" / "core" / "block_manager.py", "a") as source:
        source.write("# edited after the build\n")
    result = _python(WHERE, root)
    assert result.returncode == 0, result.stderr
    build, *files = result.stdout.splitlines()
    assert build == "pure Python (stale compiled build: engine/core/block_manager.py changed since the compiled build)"
    assert all(f.endswith(".py") for f in files), files  # all of it: not one module alone
    warnings = [line for line in result.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warnings) == 1 and "pip install -e ." in warnings[0], result.stderr
