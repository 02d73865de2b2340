"""What a small `servesim run` imports and costs: import time, wall time and peak RSS, per checkout.

Each command runs in a fresh interpreter from each checkout given (`--roots`, default this one; give an older
checkout, e.g. `git worktree add /tmp/base <commit>`, to compare), alternating, `--repeats` times:
  help      `servesim run --help`
  none      a small run (configs/quickstart.yaml at 1 req/s, vLLM and Orca (Oracle), two minutes of traffic,
            one process) with `--no-plots --iterations none`
  csv       the same with `--no-plots --iterations csv`
  parquet   the same with `--no-plots` (Parquet: the default)
  plots     the same with the plots and Parquet (the defaults)
Import time is `python -X importtime`'s, summed over the top-level imports (cumulative microseconds of the
lines with no indentation); wall time and peak RSS are the process's own (os.wait4). Also lists which of
pandas, pyarrow, matplotlib, simpy the process loaded. Ends with one line per root and case: median values.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--set", "rates=[1.0]", "--set", "workload.duration_s=120", "--set", "systems=[vllm,orca-oracle]",
         "--jobs", "1"]
CASES = {
    "help": ["--help"],
    "none": [*SMALL, "--no-plots", "--iterations", "none"],
    "csv": [*SMALL, "--no-plots", "--iterations", "csv"],
    "parquet": [*SMALL, "--no-plots"],
    "plots": SMALL,
}
HEAVY = ("pandas", "pyarrow", "matplotlib", "simpy")
TOP_LEVEL = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \| (\S+)$")


def one(root: Path, case: str, out: Path) -> tuple[float, float, float, list[str]]:
    """(import ms, wall s, peak RSS MB, heavy packages loaded) of one process."""
    args = CASES[case] if case == "help" else [str(root / "configs" / "quickstart.yaml"), "--out", str(out),
                                                *CASES[case]]
    command = [sys.executable, "-X", "importtime", "-m", "servesim", "run", *args]
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = proc.stderr.read() if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall_s = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{root}: {case} failed:\n{stderr[-2000:]}")
    import_us, loaded = 0, set()
    for line in stderr.splitlines():
        match = TOP_LEVEL.match(line)
        if match:
            import_us += int(match.group(1))
        if line.startswith("import time:"):
            loaded.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return import_us / 1000, wall_s, usage.ru_maxrss / 1024, [name for name in HEAVY if name in loaded]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roots", nargs="+", type=Path, default=[ROOT])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results: dict[tuple[Path, str], list[tuple[float, float, float, list[str]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for case in args.cases:
                for i, root in enumerate(args.roots):
                    result = one(root, case, Path(tmp) / f"{i}-{case}-{repeat}")
                    results.setdefault((root, case), []).append(result)
                    print(f"{root} {case:<8} run {repeat + 1}: import {result[0]:6.0f} ms, {result[1]:5.2f} s, "
                          f"{result[2]:5.0f} MB, loads {', '.join(result[3]) or 'none of them'}", flush=True)
    for (root, case), runs in results.items():
        print(f"root={root} case={case} import_ms={statistics.median(r[0] for r in runs):.0f} "
              f"wall_s={statistics.median(r[1] for r in runs):.2f} "
              f"peak_rss_mb={statistics.median(r[2] for r in runs):.0f}"
              f" loads={','.join(runs[-1][3]) or '-'} runs_wall_s={','.join(f'{r[1]:.2f}' for r in runs)}"
              f" runs_import_ms={','.join(f'{r[0]:.0f}' for r in runs)}")


if __name__ == "__main__":
    main()
