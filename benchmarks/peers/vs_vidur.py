"""servesim against Vidur (the best-known peer simulator) on one trace: wall time, peak RSS, mean latency and TTFT.

The trace is benchmarks/speed/run_speed.py's `llama-7b` case: configs/quickstart.yaml with one hour of Poisson
traffic at 2 req/s, real ShareGPT lengths (7,239 requests), LLaMA-7B on an A100-80GB, vLLM, block size 16.
servesim runs it as a user does (the whole `servesim run` process, run_speed.servesim_run). Vidur
(PyPI `vidur`, in its own venv) replays the same requests (benchmarks/peers/vidur_trace.py) with its vLLM
scheduler and its default random-forest execution-time predictor, configured as close to servesim's
deployment as its flags allow (the differences are printed). Both processes are timed whole with
os.wait4 in the same invocation, each pinned to the same core and niced, one after the other.

Vidur's inputs: the A100 per-operation timings Vidur published (the `--measurements` folder:
a100/meta-llama_Llama-2-7b-hf.mlp.csv, MIT, the same files servesim's A100 linear part was fitted on),
and for attention, whose published table is a Git LFS file the wheel lacks, a stand-in in Vidur's format
priced by servesim's own cost model (benchmarks/peers/vidur_attention.py). Vidur's first run trains its models
(cached under --cache, reused after); that run's time is printed apart from the timed one.

    PYTHONPATH=. python benchmarks/peers/vs_vidur.py [--vidur-python ../vidur-venv/bin/python]
        [--measurements ../shared/reference/gpu-measurements] [--cache ~/.cache/servesim-vs-vidur] [--core 1]
        [--repeats 1] [--vidur-native]

Skips (a message, exit 0) where Vidur or the measurements cannot be found. Install Vidur with
    python3.11 -m venv ../vidur-venv && ../vidur-venv/bin/pip install vidur==0.0.26
Ends with one line: vidur_wall_s=... servesim_wall_s=... ratio=... and the rest of the figures.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
from pathlib import Path

import pandas as pd

from benchmarks.peers.vidur_attention import attention_table
from benchmarks.peers.vidur_profiles import write_datasets
from benchmarks.peers.vidur_run import (
    DEVICE,
    MAX_BATCH_SIZE,
    MODEL_NAME,
    NETWORK_DEVICE,
    NUM_TRAINED_MODELS,
    PREDICTOR,
    VERSION,
    VidurRun,
    request_metrics,
    trained_models,
    vidur_command,
    vidur_env,
    vidur_version,
)
from benchmarks.peers.vidur_trace import servesim_trace, write_vidur_trace
from benchmarks.speed.run_speed import ROOT, TRACES, run_sets, servesim_run, timed_process
from sim.experiment.config import Experiment, load_experiment
from sim.experiment.progress import duration_text
from sim.experiment.run import make_cost_model

CONFIG = ROOT / "configs" / "quickstart.yaml"
TRACE = "llama-7b"
MLP_FILE = Path("a100") / "meta-llama_Llama-2-7b-hf.mlp.csv"
ALL_REDUCE_FILE = Path("network") / "a100_dgx.all_reduce.csv"
HEARTBEAT_S = 30.0
MAX_MODEL_LEN = 4096  # Vidur's LLaMA-2-7B context: its profiler's grid for this model goes this far


def skip(reason: str) -> None:
    print(f"vs_vidur: skipped: {reason}")
    raise SystemExit(0)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vidur-python", type=Path,
                        default=Path(os.environ.get("VIDUR_PYTHON", ROOT.parent / "vidur-venv" / "bin" / "python")),
                        help="the Python of a venv with vidur installed (default: $VIDUR_PYTHON or ../vidur-venv)")
    parser.add_argument("--measurements", type=Path, default=ROOT.parent / "shared" / "reference" / "gpu-measurements",
                        help="folder with Vidur's published A100 timings (a100/, network/)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "servesim-vs-vidur",
                        help="where Vidur's inputs and trained models are kept between runs")
    parser.add_argument("--core", type=int, default=1, help="the CPU both simulators are pinned to")
    parser.add_argument("--repeats", type=int, default=1, help="timed processes of each simulator (median printed)")
    parser.add_argument("--vidur-native", action="store_true",
                        help="Vidur's C++ execution-time lookup (use_native_execution_time_predictor; off by default)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    return args


def check_inputs(args: argparse.Namespace) -> str:
    """Vidur's version; skips where Vidur or the measurements are missing."""
    for name in (MLP_FILE, ALL_REDUCE_FILE):
        if not (args.measurements / name).is_file():
            skip(f"no {args.measurements / name} (Vidur's published A100 timings; --measurements)")
    version = vidur_version(args.vidur_python)
    if version is None:
        skip(f"vidur cannot be imported with {args.vidur_python} (--vidur-python or $VIDUR_PYTHON); install it with "
             f"`python3.11 -m venv ../vidur-venv && ../vidur-venv/bin/pip install vidur=={VERSION}`")
    if version != VERSION:
        print(f"warning: vidur {version} found; this benchmark was written against {VERSION}'s flags")
    return version


def pin(core: int) -> None:
    """Pin this process, and so both simulators it starts, to one core, and nice them: the other core stays usable."""
    if core not in os.sched_getaffinity(0):
        raise SystemExit(f"--core {core}: not one of this process's CPUs {sorted(os.sched_getaffinity(0))}")
    os.sched_setaffinity(0, {core})
    os.nice(10)


def attention_csv(exp: Experiment) -> bytes:
    """The stand-in attention table, priced by the cost model servesim's vLLM run uses."""
    system = exp.systems[0]
    model = exp.model
    identity = dict(n_embd=model.hidden_size, n_q_head=model.num_heads, n_kv_head=model.num_kv_heads,
                    block_size=system.block_size, num_tensor_parallel_workers=exp.tensor_parallel,
                    max_model_len=MAX_MODEL_LEN)
    table = attention_table(make_cost_model(exp, system), model.num_layers, identity, MAX_MODEL_LEN, MAX_BATCH_SIZE)
    return table.to_csv(index=False).encode()


def prepare_vidur(args: argparse.Namespace, exp: Experiment, work: Path) -> VidurRun:
    overrides = run_sets(TRACES[TRACE])
    trace_csv = write_vidur_trace(servesim_trace(CONFIG, overrides), work / "trace.csv")
    vidur_cache = args.cache / "vidur"
    datasets = write_datasets(vidur_cache, MODEL_NAME, DEVICE, NETWORK_DEVICE,
                              (args.measurements / MLP_FILE).read_bytes(), attention_csv(exp),
                              (args.measurements / ALL_REDUCE_FILE).read_bytes())
    system = exp.systems[0]
    cap = system.max_num_batched_tokens
    return VidurRun(args.vidur_python, trace_csv, datasets, vidur_cache, work / "vidur-out",
                    exp.kv_pool(system).num_gpu_blocks, system.block_size, system.watermark,
                    cap if cap is not None else MAX_MODEL_LEN, args.vidur_native)


def settings(exp: Experiment, run: VidurRun) -> list[tuple[str, str, str]]:
    """(setting, servesim, Vidur) for every setting of the two deployments, in words."""
    system, model = exp.systems[0], exp.model
    same = "same"
    return [
        ("model", f"{model.name} (vocab {model.vocab_size}, context {model.max_seq_len})",
         f"{MODEL_NAME} (same shape; vocab 32768, context {MAX_MODEL_LEN})"),
        ("GPU", f"{exp.hardware.name}, TP {exp.tensor_parallel}, 1 replica",
         f"{DEVICE} (80 GB), TP 1, 1 stage, 1 replica"),
        ("KV cache", f"{run.num_blocks} blocks of {run.block_size} (servesim's memory rule)", same),
        ("admission watermark", f"{system.watermark:g} of the blocks", same),
        ("tokens per iteration", f"at most {run.max_tokens_in_batch} (max_num_batched_tokens)",
         f"{same} (max_tokens_in_batch)"),
        ("sequences per iteration", f"at most {system.max_num_seqs} (max_num_seqs)",
         f"at most {MAX_BATCH_SIZE} (batch_size_cap: its predictions stop at {MAX_BATCH_SIZE})"),
        ("batching", "prompts and decodes in one iteration (paper-era vLLM)",
         "an iteration of new prompts whenever any can be admitted, decodes wait (its vLLM scheduler)"),
        ("preemption", f"{system.preemption} (recompute for one sequence)", "recompute (restart)"),
        ("linear layers, norms, activations", "servesim's fit of the A100 per-op measurements",
         f"random forests ({PREDICTOR}, its default grid) on the same measurements, tabulated; looked up in "
         f"{'C++ (--vidur-native)' if run.native_predictor else 'Python (its default)'}"),
        ("attention", "the A100 clock's attention (fitted on Vidur's measured A100 kernels, decode in waves) "
         "plus the paged kernel's cost per block",
         "stand-in table from the same model; decode KV rounded up to 256 tokens, a prefill priced as a "
         "chunk over its own length cached"),
        ("LM head, host work", "charged (logits per sequence; the engine's host work per step)", "not modelled"),
        ("outputs", "requests.csv.gz, iterations.parquet, summary, 4 PNG figures",
         "request and batch metric CSVs (plots off: kaleido needs Chrome; Chrome trace off)"),
    ]


def print_settings(rows: list[tuple[str, str, str]]) -> None:
    print("deployment (servesim | Vidur):")
    for name, ours, theirs in rows:
        print(f"  {name:<34} {ours} | {theirs}")


class Heartbeat:
    """Prints how long Vidur has run every HEARTBEAT_S, with the models trained so far and a rough ETA while
    it trains (models differ in cost: the decode-attention forest, trained last, is the slowest)."""

    def __init__(self, log_path: Path, label: str):
        self.log_path, self.label = log_path, label
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)
        self.elapsed = 0.0

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()

    def _beat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            self.elapsed += HEARTBEAT_S
            trained = trained_models(self.log_path.read_text(errors="replace")) if self.log_path.exists() else 0
            line = f"  {self.label}: {duration_text(self.elapsed)} so far"
            if 0 < trained < NUM_TRAINED_MODELS:
                left = self.elapsed / trained * (NUM_TRAINED_MODELS - trained)
                line += f", training: {trained}/{NUM_TRAINED_MODELS} models, ~{duration_text(left)} left (rough)"
            print(line, flush=True)


def vidur_process(run: VidurRun, label: str) -> tuple[float, float, int]:
    """(wall s, peak RSS MB, models trained) of one whole Vidur process."""
    log_path = run.output_dir.parent / f"{label.replace(' ', '-')}.log"
    run.output_dir.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log, Heartbeat(log_path, label):
        wall_s, peak_mb, code = timed_process(vidur_command(run), run.output_dir.parent, vidur_env(), log)
    text = log_path.read_text(errors="replace")
    if code != 0:
        raise SystemExit(f"Vidur failed ({code}); the end of its log:\n{text[-3000:]}")
    return wall_s, peak_mb, trained_models(text)


def servesim_means(out: Path) -> tuple[float, float, int]:
    """(mean end-to-end latency s, mean TTFT s, requests) over every request of servesim's run."""
    (requests_file,) = (out / "runs").glob("*/requests.csv.gz")
    requests = pd.read_csv(requests_file)
    return ((requests["finish_s"] - requests["arrival_s"]).mean(),
            (requests["first_token_s"] - requests["arrival_s"]).mean(), len(requests))


def vidur_means(run: VidurRun) -> tuple[float, float, int]:
    """The same from Vidur's request_metrics.csv (request_e2e_time, prefill_e2e_time: arrival to first token)."""
    metrics = request_metrics(run.output_dir)
    return metrics["request_e2e_time"].mean(), metrics["prefill_e2e_time"].mean(), len(metrics)


def first_vidur_run(run: VidurRun) -> tuple[float, float] | None:
    """Vidur's first run: (wall s, peak RSS MB) to count as a timed run where its models were cached, else
    None after reporting the run that trained them apart."""
    print(f"Vidur {VERSION}: first run (trains and caches its models if {run.cache_dir} lacks them) ...", flush=True)
    wall_s, peak_mb, trained = vidur_process(run, "Vidur run 1")
    if not trained:
        print(f"  models were cached: run 1 is a timed run ({wall_s:.1f} s, {peak_mb:.0f} MB)")
        return wall_s, peak_mb
    print(f"  first run: {duration_text(wall_s)} ({wall_s:.0f} s) training {trained} models, then simulating once; "
          f"peak RSS {peak_mb:.0f} MB")
    return None


def timed_runs(run: VidurRun, work: Path, repeats: int) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(servesim's, Vidur's) (wall s, peak RSS MB) of `repeats` whole processes each, alternating."""
    first = first_vidur_run(run)
    theirs = [first] if first is not None else []
    ours: list[tuple[float, float]] = []
    while len(ours) < repeats or len(theirs) < repeats:
        if len(ours) < repeats:
            ours.append(servesim_run(work / f"servesim-{len(ours)}", TRACES[TRACE], "parquet"))
            print(f"  servesim run {len(ours)}: {ours[-1][0]:.2f} s, {ours[-1][1]:.0f} MB", flush=True)
        if len(theirs) < repeats:
            label = f"Vidur run {len(theirs) + (1 if first is not None else 2)}"
            wall_s, peak_mb, trained = vidur_process(run, label)
            if trained:
                raise SystemExit(f"{label} trained {trained} models again: its cache at {run.cache_dir} was not reused")
            theirs.append((wall_s, peak_mb))
            print(f"  {label}: {wall_s:.2f} s, {peak_mb:.0f} MB", flush=True)
    return ours, theirs


def median_process(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(w for w, _ in samples), statistics.median(m for _, m in samples)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    version = check_inputs(args)
    pin(args.core)
    print(f"both simulators pinned to CPU {args.core} (as taskset -c {args.core}) and niced (+10), one at a time")
    exp = load_experiment(CONFIG, run_sets(TRACES[TRACE]))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run = prepare_vidur(args, exp, work)
        print(f"trace: {run.trace_csv.name}, the requests of servesim's run ({exp.workload.duration_s:g} s at "
              f"{exp.rates[0]:g} req/s, seed {exp.seeds[0]})")
        print(f"Vidur {version} inputs: {args.measurements / MLP_FILE} (measured on A100s, published by Vidur);"
              f" attention: a stand-in table in Vidur's format priced by servesim's cost model "
              f"(calibrate/profiles/a100-80gb.yaml, fitted on Vidur's measured A100 attention, with the paged kernel's "
              f"cost per block), not Vidur's measured table itself; "
              f"datasets {run.datasets.compute}, {run.datasets.network}")
        print_settings(settings(exp, run))
        ours, theirs = timed_runs(run, work, args.repeats)
        print(f"median of {args.repeats} whole processes each:")
        report(servesim_means(work / f"servesim-{args.repeats - 1}"), vidur_means(run), median_process(ours),
               median_process(theirs))


def report(ours: tuple[float, float, int], theirs: tuple[float, float, int], our_process: tuple[float, float],
           their_process: tuple[float, float]) -> None:
    print(f"{'':<10} {'wall s':>8} {'peak RSS MB':>12} {'mean latency s':>15} {'mean TTFT s':>12} {'requests':>9}")
    for name, (wall, rss), (latency, ttft, count) in (("servesim", our_process, ours),
                                                      ("Vidur", their_process, theirs)):
        print(f"{name:<10} {wall:>8.2f} {rss:>12.0f} {latency:>15.3f} {ttft:>12.4f} {count:>9}")
    ratio = their_process[0] / our_process[0]
    print(f"Vidur / servesim: wall {ratio:.1f}x, peak RSS {their_process[1] / our_process[1]:.1f}x")
    print(f"vidur_wall_s={their_process[0]:.2f} servesim_wall_s={our_process[0]:.2f} ratio={ratio:.2f} "
          f"vidur_rss_mb={their_process[1]:.0f} servesim_rss_mb={our_process[1]:.0f} "
          f"vidur_latency_s={theirs[0]:.4f} servesim_latency_s={ours[0]:.4f} "
          f"vidur_ttft_s={theirs[1]:.4f} servesim_ttft_s={ours[1]:.4f}")


if __name__ == "__main__":
    main()
