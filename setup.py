"""servesim's build: pyproject.toml holds everything but this one choice.

The control plane (`engine/core`), the simulator's loop (`sim/core`: the replica, fast-forward, the beam
parents) and the roofline's arithmetic per step (`calibrate/clock/roofline_terms.py`, a speculating step's
`speculating_terms.py`) are compiled to C extensions
by mypyc where it can be: mypyc importable (the pinned mypy of `[build-system] requires`) and a C compiler
present. Otherwise, with `SERVESIM_PURE_PYTHON=1` set, or if the
compilation fails, servesim installs as the pure Python it is, and says so in one line. The sources stay
beside the extensions; `engine/core/_compiled.json`, written after a successful build, records what each was
compiled from, so that engine/core/compiled.py never runs a stale one (docs/compiled.md).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
PURE_ENV = "SERVESIM_PURE_PYTHON"
MANIFEST = Path("engine", "core", "_compiled.json")  # read by engine/core/compiled.py
GROUP = "engine.core.native"  # mypyc's shared library: engine/core/native__mypyc.*.so
# the packages' entry points and the module choosing the build; and the values that cross processes pickled and
# are fingerprinted by their __dict__ (a compiled frozen dataclass has none and does not unpickle), read once a run;
# and the allocators' interface, a typing.Protocol (compiled, it is a native class isinstance cannot check against)
NOT_COMPILED = {"__init__.py", "compiled.py", "system.py", "spec.py", "speculative.py", "allocator.py"}
# the simulator's loop; the rest runs once
SIM_CORE = ["replica.py", "fast_forward.py", "router_wakes.py", "beams.py", "known_arrivals.py", "handover.py"]
# in calibrate/clock/: the roofline cost model's arithmetic per step, and a speculating step's; the rest runs once
CALIBRATE = ["roofline_terms.py", "speculating_terms.py"]


def compiled_sources() -> list[Path]:
    core = sorted(p for p in Path("engine", "core").rglob("*.py") if p.name not in NOT_COMPILED)
    return (core + [Path("sim", "core", name) for name in SIM_CORE]
            + [Path("calibrate", "clock", name) for name in CALIBRATE])


def module_name(path: Path) -> str:
    return ".".join(path.with_suffix("").parts)


def pure(reason: str) -> list:
    print(f"servesim: installing pure Python ({reason}); the simulator runs slower; docs/compiled.md",
          file=sys.stderr)
    return []


def compiler_missing() -> str | None:
    """Why no C compiler can build an extension here (None: one seems to be there; a failure is caught later)."""
    compiler = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "").split()  # CC: as distutils reads it
    if compiler and shutil.which(compiler[0]) is None:
        return f"no C compiler: {compiler[0]} not found"
    if not Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        return "no Python.h: the Python development headers are not installed"
    return None


def extensions() -> list:
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return pure(f"{PURE_ENV}={os.environ[PURE_ENV]}")
    try:
        from mypyc.build import mypycify
    except ImportError:
        return pure("mypyc is not installed: it comes with mypy")
    missing = compiler_missing()
    if missing is not None:
        return pure(missing)
    try:
        # the compiled modules' errors fail the build; those of the modules they import (numpy, sim.workload) do not
        options = ["--follow-imports=silent", "--ignore-missing-imports"]
        return mypycify([*options, *map(str, compiled_sources())], opt_level="3", group_name=GROUP)
    except SystemExit:  # mypyc printed the type errors, and exits
        return pure("mypyc found the type errors above")
    except Exception as err:
        return pure(f"mypyc failed: {type(err).__name__}: {err}")


class BuildExt(build_ext):
    """Builds the extensions, then records what they were built from; a failed build leaves pure Python."""

    def run(self) -> None:
        if self.inplace or self.editable_mode:
            remove_inplace_build()  # an earlier build's extensions: none of them may outlive it
        try:
            super().run()
        except Exception as err:  # the compiler's or the linker's error: keep nothing of this build
            self.remove_outputs()
            pure(f"compiling failed, {type(err).__name__}: the compiler's errors are above")
            return
        if not self.extensions:
            return
        manifest = json.dumps({"modules": {module_name(p): hashlib.sha256(p.read_bytes()).hexdigest()
                                           for p in compiled_sources()}}, indent=1, sort_keys=True) + "\n"
        for base in {Path(self.build_lib), ROOT} if self.inplace else {Path(self.build_lib)}:
            (base / MANIFEST).parent.mkdir(parents=True, exist_ok=True)
            (base / MANIFEST).write_text(manifest)

    def remove_outputs(self) -> None:
        for output in self.get_outputs():
            Path(output).unlink(missing_ok=True)
        for base in (Path(self.build_lib), ROOT):
            (base / MANIFEST).unlink(missing_ok=True)


def remove_inplace_build() -> None:
    """A pure install over an earlier in-place compiled one (pip install -e .): the old extensions go, so that
    what runs is what was asked for."""
    (ROOT / MANIFEST).unlink(missing_ok=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    for folder in (ROOT / "engine" / "core", ROOT / "sim" / "core", ROOT / "calibrate"):
        for extension in folder.rglob(f"*{suffix}"):
            extension.unlink()


os.chdir(ROOT)  # mypyc names the modules by their paths from here
# pip runs this file for the metadata too (egg_info): mypyc only where something is built
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop", "bdist_egg"}
EXTENSIONS = extensions() if BUILDS & set(sys.argv[1:]) else []
if not EXTENSIONS and BUILDS & set(sys.argv[1:]):
    remove_inplace_build()
setup(ext_modules=EXTENSIONS, cmdclass={"build_ext": BuildExt})
