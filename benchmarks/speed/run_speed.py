"""The whole `servesim run` process, as a user waits for it: wall time and peak RSS, by iterations format.

One hour of ShareGPT traffic at 2 req/s under vLLM, one run, `--jobs 1`, in a fresh output folder each
time: OPT-13B on an A100-40GB (the quickstart's deployment, as benchmarks/speed/sim_speed.py) and LLaMA-7B on
an A100-80GB (the trace of the comparison with Vidur, benchmarks/peers/vs_vidur.py). Each format is timed in the
same session, alternating, `--repeats` times; the median is printed. `csv` is the writer every run used before
Parquet (pandas and gzip), so csv / parquet is the before / after ratio. Peak RSS is the process's own (os.wait4).
Where the control plane is compiled (mypyc; docs/compiled.md), every run is made twice, alternating: as built,
and as pure Python (SERVESIM_PURE_PYTHON=1), and the compiled / pure ratio is printed (--builds compiled: the
build alone).
With --baseline REF, another commit's code (exported with `git archive`, built in place where the builds include
compiled) is timed too, each of its runs alternating with this checkout's (baseline first), and baseline / this is
printed; with --core N every run is pinned to one core (the figures' processes then share it with the simulation).
Ends with one line per trace, format, build and code:
trace=<name> iterations=<format> build=<compiled|pure> code=<this|baseline> wall_s=<float> peak_rss_mb=<float>
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: the benchmarks package beside it
from benchmarks.speed.baseline_code import exported  # noqa: E402

TRACES = {  # name: --set overrides of configs/quickstart.yaml
    "opt-13b": [],
    "llama-7b": ["model=llama-7b", "hardware=a100-80gb", "kv_cache_gib=null"],
}
FORMATS = ("csv", "parquet", "none")
BUILDS = ("compiled", "pure")
PURE_ENV = "SERVESIM_PURE_PYTHON"  # engine/core/compiled.py: the control plane from its sources


def run_sets(overrides: list[str], duration_s: float = 3600) -> list[str]:
    """The --set values of one trace's run: one hour (duration_s) at 2 req/s under vLLM, then the trace's own."""
    return [f"workload.duration_s={duration_s:g}", "systems=[vllm]", "rates=[2]", *overrides]


def timed_process(command: list[str], cwd: Path, env: dict, log) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MB, exit code) of one process, its output to the open file `log`.
    os.wait4 gives the process's own peak RSS, as the user's `time -v` would."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall_s = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall_s, usage.ru_maxrss / 1024, proc.returncode


def servesim_run(out: Path, overrides: list[str], fmt: str, build: str | None = None,
                 code: Path = ROOT, duration_s: float = 3600) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one `servesim run` process of the code in `code` (this checkout's, or a
    baseline's export). build "pure": the control plane as pure Python, whatever is compiled; "compiled" or "pure":
    the run must say it ran that build; None: as installed."""
    sets = [arg for s in run_sets(overrides, duration_s) for arg in ("--set", s)]
    command = [sys.executable, "-m", "servesim", "run", str(code / "configs" / "quickstart.yaml"), "--out", str(out),
               "--jobs", "1", "--iterations", fmt, *sets]
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    env.update(PYTHONPATH=str(code), **({PURE_ENV: "1"} if build == "pure" else {}))
    with tempfile.TemporaryFile() as log:
        wall_s, peak_mb, exit_code = timed_process(command, code, env, log)
        log.seek(0)
        text = log.read().decode()
        if exit_code != 0:
            raise SystemExit(f"servesim run failed ({exit_code}):\n{text}")
    said = "control plane: compiled" if build == "compiled" else "control plane: pure Python"
    if build is not None and said not in text:
        raise SystemExit(f"asked for the {build} build, but the run said otherwise:\n{text}")
    return wall_s, peak_mb


def compiled_here() -> bool:
    result = subprocess.run([sys.executable, "-m", "servesim", "--version"], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return "control plane: compiled" in result.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", nargs="+", choices=sorted(TRACES), default=sorted(TRACES, reverse=True))
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--builds", nargs="+", choices=BUILDS, default=list(BUILDS),
                        help="compiled: as installed; pure: SERVESIM_PURE_PYTHON=1 (default: both, alternating)")
    parser.add_argument("--baseline", metavar="REF", help="also time this git commit's code, exported and built in "
                        "place, alternating with this checkout's, each build and format; baseline / this is printed")
    parser.add_argument("--duration-s", type=float, default=3600, help="the traffic's length (default: an hour)")
    parser.add_argument("--core", type=int, metavar="N", help="pin every run to CPU N (as taskset -c N): the figures' "
                        "processes then take turns with the simulation on that core, as beside Vidur")
    args = parser.parse_args()
    if args.core is not None:
        os.sched_setaffinity(0, {args.core})  # the runs inherit it
        print(f"every run pinned to CPU {args.core}")
    builds = args.builds if compiled_here() else ["pure"]  # nothing compiled here: pure Python alone
    print(f"builds: {', '.join(builds)}")
    with exported(args.baseline, build="compiled" in builds) if args.baseline else nullcontext() as baseline:
        codes = {"this": ROOT, **({"baseline": baseline[0]} if baseline else {})}
        if baseline:
            print(f"baseline: {baseline[1]}, alternating with this checkout (baseline first)")
        lines = [line for trace in args.traces for line in time_trace(trace, codes, builds, args)]
    print("\n".join(lines))


def time_trace(trace: str, codes: dict[str, Path], builds: list[str], args) -> list[str]:
    """Each format, build and code of one trace, alternating, --repeats times: the medians printed, and the lines."""
    keys = [(fmt, build, code) for fmt in args.formats for build in builds for code in reversed(codes)]
    walls: dict[tuple[str, str, str], list[float]] = {key: [] for key in keys}
    rss: dict[tuple[str, str, str], list[float]] = {key: [] for key in keys}
    sizes: dict[tuple[str, str], int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for fmt, build, code in keys:
                out = Path(tmp) / f"{trace}-{fmt}-{build}-{code}-{repeat}"
                wall_s, peak_mb = servesim_run(out, TRACES[trace], fmt, build, codes[code], args.duration_s)
                walls[fmt, build, code].append(wall_s)
                rss[fmt, build, code].append(peak_mb)
                files = list((out / "runs").glob("*/iterations.*"))
                sizes[fmt, code] = files[0].stat().st_size if files else 0
                print(f"{trace} {fmt:<8} {build:<8} {code:<8} run {repeat + 1}: {wall_s:6.2f} s, {peak_mb:6.1f} MB",
                      flush=True)
    print(f"{trace}: median of {args.repeats}")
    lines = []
    for fmt, build, code in keys:
        times = walls[fmt, build, code]
        wall, peak = statistics.median(times), statistics.median(rss[fmt, build, code])
        spread = (max(times) - min(times)) / wall
        ratio = (f"  csv / {fmt} = {statistics.median(walls['csv', build, code]) / wall:.2f}x"
                 if ("csv", build, code) in walls else "")
        if build == "compiled" and (fmt, "pure", code) in walls:
            ratio += f"  pure / compiled = {statistics.median(walls[fmt, 'pure', code]) / wall:.2f}x"
        if code == "this" and (fmt, build, "baseline") in walls:
            ratio += f"  baseline / this = {statistics.median(walls[fmt, build, 'baseline']) / wall:.2f}x"
        print(f"  --iterations {fmt:<8} {build:<8} {code:<8} {wall:6.2f} s (spread {spread:4.0%})  {peak:6.1f} MB  "
              f"iterations file {sizes[fmt, code] / 2**20:5.1f} MiB{ratio}")
        lines.append(f"trace={trace} iterations={fmt} build={build} code={code} wall_s={wall:.3f} "
                     f"peak_rss_mb={peak:.1f}")
    return lines


if __name__ == "__main__":
    main()
