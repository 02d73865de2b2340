"""research/ lives outside the installed package: the wheel's package list leaves it out, and the judgements no
command runs are in it, not in calibrate/."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_list_leaves_research_out():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the wheel test checks the same on any Python
    from setuptools import find_packages

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = find_packages(str(ROOT), include=include)
    assert "calibrate.judging" in packages and "sim.reproduce" in packages
    assert not [p for p in packages if p.split(".")[0] in ("research", "benchmarks", "tests")]


def test_the_judgements_no_command_runs_are_research():
    research = {p.stem for p in (ROOT / "research" / "judging").glob("*.py")}
    assert {"gpu_holdout", "gpu_rows", "tile_heldout", "transfer_shape", "fp8_gemm_heldout", "fp8_gemm_fit",
            "gemm_table"} <= research
    product = {p.stem for p in (ROOT / "calibrate").rglob("*.py")}
    assert research & product == {"__init__"}
