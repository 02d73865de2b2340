"""Another commit's code beside this checkout's, so that a benchmark times both in the same run, alternating."""
from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def exported(ref: str | None, build: bool) -> Iterator[tuple[Path, str] | None]:
    """The commit `ref` (None: where this checkout left main, their merge base) exported with `git archive` to a
    temporary folder, its control plane compiled in place there where `build` (as `pip install -e .` compiles a
    checkout's): (the folder, "<ref> (<commit>)"); None, with a line said, where there is no such commit."""
    name = ref or "main's merge base"
    asked = ["rev-parse", f"{ref}^{{commit}}"] if ref else ["merge-base", "HEAD", "main"]
    commit = subprocess.run(["git", "-C", str(ROOT), *asked], capture_output=True, text=True)
    if commit.returncode:
        print(f"\nbaseline {name}: no such commit in this checkout's repository; not compared", flush=True)
        yield None
        return
    sha = commit.stdout.strip()
    with tempfile.TemporaryDirectory(prefix="servesim-baseline-") as folder:
        archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", sha], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", folder], stdin=archive.stdout, check=True)
        if archive.wait():
            raise SystemExit(f"git archive {name} failed")
        if build:
            print(f"building {name} in place ...", flush=True)
            build_in_place(folder)
        yield Path(folder), f"{name} ({sha[:9]})"


def build_in_place(folder: str) -> None:
    """Compile an export's control plane beside its sources, as `pip install -e .` does a checkout's (setup.py)."""
    built = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], cwd=folder,
                           capture_output=True, text=True)
    if built.returncode:
        raise SystemExit(f"building the baseline failed:\n{built.stderr[-2000:]}")
