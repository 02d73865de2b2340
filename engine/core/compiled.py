"""Which build of the control plane and the simulator's loop runs: compiled (mypyc) or pure Python.

setup.py compiles the modules of `engine/core`, `sim/core` and `calibrate/clock/roofline_terms.py` to C extensions
where it can, and writes `engine/core/_compiled.json`: each compiled module's name and the SHA-256 of the
source it was compiled from. Python's import system prefers a module's extension to its .py, so this module,
imported first by `engine/core/__init__.py` (which, like every `__init__.py` and this file, is never
compiled), decides once per process and, where the answer is pure Python, installs a finder that loads
these packages' modules from their sources instead:

- `SERVESIM_PURE_PYTHON=1` in the environment: pure Python;
- a compiled module whose source changed since the build (edited, pulled, checked out), or is gone, or
  whose extension is gone, or extensions with no record of the build: pure Python, with one warning
  saying how to rebuild. All or nothing: the compiled modules call each other's classes natively, so one
  stale module cannot be swapped for its source alone;
- otherwise the compiled build, where there is one.

`BUILD` says which (`servesim --version` prints it); docs/compiled.md.
"""
from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

# json, hashlib and warnings are imported where a compiled build is found: `servesim run` starts without them

PURE_ENV = "SERVESIM_PURE_PYTHON"
MANIFEST = "_compiled.json"
SHARED_LIBRARY = "__mypyc"  # mypyc's runtime and the compiled code, which each module's extension loads
# the packages holding compiled modules; sim.core and calibrate import engine.core first
PACKAGES = ("engine.core", "sim.core", "calibrate")
COMPILED = "compiled (mypyc)"
PURE = "pure Python"
REBUILD = "pip install -e . (or reinstall servesim)"

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parents[1]  # the folder holding engine/ and sim/: the checkout, or site-packages


def source_digest(path: Path) -> str:
    import hashlib
    return hashlib.sha256(path.read_bytes()).hexdigest()


def module_source(name: str, root: Path = _ROOT) -> Path:
    return root.joinpath(*name.split(".")).with_suffix(".py")


def _extensions(root: Path) -> list[Path]:
    """The C extensions beside the compiled packages' sources."""
    found: list[Path] = []
    for package in PACKAGES:
        folder = root.joinpath(*package.split("."))
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            found.extend(folder.rglob(f"*{suffix}"))
    return sorted(set(found))


def stale_reason(root: Path = _ROOT) -> str | None:
    """Why a compiled build beside these sources must not run (None: there is none, or it is current)."""
    manifest = root / "engine" / "core" / MANIFEST
    if not manifest.is_file():
        extensions = _extensions(root)
        return None if not extensions else (f"{extensions[0].relative_to(root)} and {len(extensions) - 1} more "
                                            f"compiled modules have no {MANIFEST} saying what they were built from")
    import json
    modules: dict[str, str] = json.loads(manifest.read_text())["modules"]
    for name, digest in sorted(modules.items()):
        source = module_source(name, root)
        if not source.is_file():
            return f"{source.relative_to(root)} is gone since the compiled build"
        if source_digest(source) != digest:
            return f"{source.relative_to(root)} changed since the compiled build"
        if not any(source.with_suffix(s).is_file() for s in importlib.machinery.EXTENSION_SUFFIXES):
            return f"the compiled {name} is gone"
    for extension in _extensions(root):  # one left by an earlier build, which would load in its source's stead
        name = ".".join(extension.relative_to(root).parent.parts + (extension.name.split(".")[0],))
        if name not in modules and not name.endswith(SHARED_LIBRARY):
            return f"{extension.relative_to(root)} is not of the compiled build"
    return None


class SourceFinder:
    """A meta path finder: the compiled packages' modules from their .py files, whatever extension lies beside
    them (a file finder that knows only sources)."""

    prefixes = tuple(f"{p}." for p in PACKAGES)
    loaders = [(importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES)]

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if path is None or not fullname.startswith(self.prefixes):
            return None
        for folder in path:
            spec = importlib.machinery.FileFinder(folder, *self.loaders).find_spec(fullname)
            if spec is not None and spec.origin is not None and spec.loader is not None:
                return spec
        return None  # a folder (engine.core.scheduler): the usual finders make it a namespace package


def _choose() -> str:
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return f"{PURE} ({PURE_ENV}={os.environ[PURE_ENV]})"
    reason = stale_reason()
    if reason is not None:
        import warnings
        warnings.warn(f"servesim: {reason}: running the control plane as pure Python (slower); rebuild with "
                      f"{REBUILD}", RuntimeWarning, stacklevel=2)
        return f"{PURE} (stale compiled build: {reason})"
    if (_ROOT / "engine" / "core" / MANIFEST).is_file():
        return COMPILED
    return PURE


def _install() -> str:
    build = _choose()
    if build != COMPILED and not any(isinstance(f, SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFinder())
    return build


BUILD = _install()  # once per process: engine/core/__init__.py imports this before any compiled module


def is_compiled() -> bool:
    return BUILD == COMPILED


def control_plane_build() -> str:
    """What `servesim --version` and `servesim run` print: "compiled (mypyc)", or "pure Python" and why."""
    return BUILD
