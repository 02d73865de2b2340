"""The whole `servesim run` process, as a user waits for it: wall time and peak RSS, by iterations format.

One hour of ShareGPT traffic at 2 req/s under vLLM, one run, `--jobs 1`, in a fresh output folder each
time: OPT-13B on an A100-40GB (the quickstart's deployment, as benchmarks/sim_speed.py) and LLaMA-7B on
an A100-80GB (the issue's comparison with Vidur). Each format is timed in the same session, alternating,
`--repeats` times; the median is printed. `csv` is the writer every run used before Parquet (pandas and
gzip), so csv / parquet is the before / after ratio. Peak RSS is the process's own (os.wait4).
Ends with one line per trace and format: trace=<name> iterations=<format> wall_s=<float> peak_rss_mb=<float>
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = {  # name: --set overrides of configs/quickstart.yaml
    "opt-13b": [],
    "llama-7b": ["model=llama-7b", "hardware=a100-80gb", "kv_cache_gib=null"],
}
FORMATS = ("csv", "parquet", "none")


def run_sets(overrides: list[str]) -> list[str]:
    """The --set values of one trace's run: one hour at 2 req/s under vLLM, then the trace's own."""
    return [f"workload.duration_s={3600}", "systems=[vllm]", "rates=[2]", *overrides]


def timed_process(command: list[str], cwd: Path, env: dict, log) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MB, exit code) of one process, its output to the open file `log`.
    os.wait4 gives the process's own peak RSS, as the user's `time -v` would."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall_s = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall_s, usage.ru_maxrss / 1024, proc.returncode


def servesim_run(out: Path, overrides: list[str], fmt: str) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one `servesim run` process."""
    command = [sys.executable, "-m", "servesim", "run", str(ROOT / "configs" / "quickstart.yaml"), "--out", str(out),
               "--jobs", "1", "--iterations", fmt, *[arg for s in run_sets(overrides) for arg in ("--set", s)]]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryFile() as log:
        wall_s, peak_mb, code = timed_process(command, ROOT, env, log)
        if code != 0:
            log.seek(0)
            raise SystemExit(f"servesim run failed ({code}):\n{log.read().decode()}")
    return wall_s, peak_mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", nargs="+", choices=sorted(TRACES), default=sorted(TRACES, reverse=True))
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for trace in args.traces:
            walls: dict[str, list[float]] = {fmt: [] for fmt in args.formats}
            rss: dict[str, list[float]] = {fmt: [] for fmt in args.formats}
            sizes: dict[str, int] = {}
            for repeat in range(args.repeats):
                for fmt in args.formats:
                    out = Path(tmp) / f"{trace}-{fmt}-{repeat}"
                    wall_s, peak_mb = servesim_run(out, TRACES[trace], fmt)
                    walls[fmt].append(wall_s)
                    rss[fmt].append(peak_mb)
                    files = list((out / "runs").glob("*/iterations.*"))
                    sizes[fmt] = files[0].stat().st_size if files else 0
                    print(f"{trace} {fmt:<8} run {repeat + 1}: {wall_s:6.2f} s, {peak_mb:6.1f} MB", flush=True)
            print(f"{trace}: median of {args.repeats}")
            for fmt in args.formats:
                wall, peak = statistics.median(walls[fmt]), statistics.median(rss[fmt])
                ratio = f"  csv / {fmt} = {statistics.median(walls['csv']) / wall:.2f}x" if "csv" in walls else ""
                print(f"  --iterations {fmt:<8} {wall:6.2f} s  {peak:6.1f} MB  iterations file "
                      f"{sizes[fmt] / 2**20:5.1f} MiB{ratio}")
                lines.append(f"trace={trace} iterations={fmt} wall_s={wall:.3f} peak_rss_mb={peak:.1f}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
