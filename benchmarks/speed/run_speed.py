"""The whole `servesim run` process, as a user waits for it: wall time and peak RSS, by iterations format.

One hour of ShareGPT traffic at 2 req/s under vLLM, one run, `--jobs 1`, in a fresh output folder each
time: OPT-13B on an A100-40GB (the quickstart's deployment, as benchmarks/speed/sim_speed.py) and LLaMA-7B on
an A100-80GB (the trace of the comparison with Vidur, benchmarks/peers/vs_vidur.py). Each format is timed in the
same session, alternating, `--repeats` times; the median is printed. `csv` is the writer every run used before
Parquet (pandas and gzip), so csv / parquet is the before / after ratio. Peak RSS is the process's own (os.wait4).
Where the control plane is compiled (mypyc; docs/compiled.md), every run is made twice, alternating: as built,
and as pure Python (SERVESIM_PURE_PYTHON=1), and the compiled / pure ratio is printed (--builds compiled: the
build alone).
Ends with one line per trace, format and build:
trace=<name> iterations=<format> build=<compiled|pure> wall_s=<float> peak_rss_mb=<float>
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

ROOT = Path(__file__).resolve().parents[2]
TRACES = {  # name: --set overrides of configs/quickstart.yaml
    "opt-13b": [],
    "llama-7b": ["model=llama-7b", "hardware=a100-80gb", "kv_cache_gib=null"],
}
FORMATS = ("csv", "parquet", "none")
BUILDS = ("compiled", "pure")
PURE_ENV = "SERVESIM_PURE_PYTHON"  # engine/core/compiled.py: the control plane from its sources


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


def servesim_run(out: Path, overrides: list[str], fmt: str, build: str | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one `servesim run` process. build "pure": the control plane as pure
    Python, whatever is compiled; "compiled" or "pure": the run must say it ran that build; None: as installed."""
    command = [sys.executable, "-m", "servesim", "run", str(ROOT / "configs" / "quickstart.yaml"), "--out", str(out),
               "--jobs", "1", "--iterations", fmt, *[arg for s in run_sets(overrides) for arg in ("--set", s)]]
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    env.update(PYTHONPATH=str(ROOT), **({PURE_ENV: "1"} if build == "pure" else {}))
    with tempfile.TemporaryFile() as log:
        wall_s, peak_mb, code = timed_process(command, ROOT, env, log)
        log.seek(0)
        text = log.read().decode()
        if code != 0:
            raise SystemExit(f"servesim run failed ({code}):\n{text}")
    said = "control plane: compiled" if build == "compiled" else "control plane: pure Python"
    if build is not None and said not in text:
        raise SystemExit(f"asked for the {build} build, but the run said otherwise:\n{text}")
    return wall_s, peak_mb


def compiled_here() -> bool:
    result = subprocess.run([sys.executable, "-m", "servesim", "--version"], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return "control plane: compiled" in result.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", nargs="+", choices=sorted(TRACES), default=sorted(TRACES, reverse=True))
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--builds", nargs="+", choices=BUILDS, default=list(BUILDS),
                        help="compiled: as installed; pure: SERVESIM_PURE_PYTHON=1 (default: both, alternating)")
    args = parser.parse_args()
    builds = args.builds if compiled_here() else ["pure"]  # nothing compiled here: pure Python alone
    print(f"builds: {', '.join(builds)}")
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for trace in args.traces:
            keys = [(fmt, build) for fmt in args.formats for build in builds]
            walls: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
            rss: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
            sizes: dict[str, int] = {}
            for repeat in range(args.repeats):
                for fmt, build in keys:
                    out = Path(tmp) / f"{trace}-{fmt}-{build}-{repeat}"
                    wall_s, peak_mb = servesim_run(out, TRACES[trace], fmt, build)
                    walls[fmt, build].append(wall_s)
                    rss[fmt, build].append(peak_mb)
                    files = list((out / "runs").glob("*/iterations.*"))
                    sizes[fmt] = files[0].stat().st_size if files else 0
                    print(f"{trace} {fmt:<8} {build:<8} run {repeat + 1}: {wall_s:6.2f} s, {peak_mb:6.1f} MB",
                          flush=True)
            print(f"{trace}: median of {args.repeats}")
            for fmt, build in keys:
                wall, peak = statistics.median(walls[fmt, build]), statistics.median(rss[fmt, build])
                spread = (max(walls[fmt, build]) - min(walls[fmt, build])) / wall
                ratio = (f"  csv / {fmt} = {statistics.median(walls['csv', build]) / wall:.2f}x"
                         if ("csv", build) in walls else "")
                if build == "compiled" and (fmt, "pure") in walls:
                    ratio += f"  pure / compiled = {statistics.median(walls[fmt, 'pure']) / wall:.2f}x"
                print(f"  --iterations {fmt:<8} {build:<8} {wall:6.2f} s (spread {spread:4.0%})  {peak:6.1f} MB  "
                      f"iterations file {sizes[fmt] / 2**20:5.1f} MiB{ratio}")
                lines.append(f"trace={trace} iterations={fmt} build={build} wall_s={wall:.3f} peak_rss_mb={peak:.1f}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
