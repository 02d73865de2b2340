"""What pyproject.toml installs: every requirement pinned to a range, every core one imported by the packages, the
Quickstart's install no more than the main job and the tests need, and CI's install every extra."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml takes Python 3.11's tomllib")

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
PACKAGES = ("servesim", "sim", "calibrate", "engine", "fidelity")
IMPORT_NAMES = {"pyyaml": "yaml"}  # a distribution imported under another name
# a range or one version, and optionally an environment marker after it (`; python_version < '3.14'`)
PINNED = re.compile(r"^[A-Za-z0-9_.-]+(>=[0-9][^,<>=;]*,<[0-9][^,<>=;]*|==[0-9][^,<>=;]*)(;.+)?$")
# the Quickstart's extras: the real engine and the tests' tools; dask and rebuild-data stay out (their tests skip)
QUICKSTART_EXTRAS = {"engine", "test"}


def requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[;]", requirement, maxsplit=1)[0].lower().replace("-", "_")


def extras_installed(text: str) -> list[set[str]]:
    """The extras of each `pip install -e ".[a,b]"` in a text."""
    return [set(found.split(",")) for found in re.findall(r"""pip install (?:-q )?-e ["']\.\[([^\]]+)\]["']""", text)]


def imported_top_level(package: str) -> set[str]:
    found = set()
    for path in (REPO / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found


def test_every_requirement_is_pinned_to_a_range():
    extras = PROJECT["optional-dependencies"].values()
    requirements = [*PROJECT["dependencies"], *(r for extra in extras for r in extra)]
    assert [r for r in requirements if not PINNED.match(r.replace(" ", ""))] == []


def test_every_core_dependency_is_imported_by_the_packages():
    imported = set().union(*(imported_top_level(package) for package in PACKAGES))
    names = {requirement_name(r) for r in PROJECT["dependencies"]}
    assert {name for name in names if IMPORT_NAMES.get(name, name) not in imported} == set()


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_the_quickstart_installs_the_engine_and_the_tests_tools_only(page):
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / page).read_text(encoding="utf-8"), flags=re.S)
    first_command = next(block for block in blocks if "pip install" in block)
    assert extras_installed(first_command) == [QUICKSTART_EXTRAS]


def test_ci_installs_every_extra():
    """So that CI runs the tests that skip without dask or rebuild-data, and lints and builds the docs."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert extras_installed(ci) == [set(PROJECT["optional-dependencies"])]
