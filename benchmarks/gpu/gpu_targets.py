"""The GPU targets, read from what a GPU session measured, each printed next to its floor.

    PYTHONPATH=. python benchmarks/gpu/gpu_targets.py /tmp/gpu_session [--hardware h200] [--gemm]

Reads the session folder benchmarks/gpu_session.sh fills: profiles/<device>-<model>-{graphs,eager}.{raw.csv,yaml},
kernels/kernel_timing.csv, validation-{graphs,eager}/{summary,exact}.csv. Prints one line per target:
what was measured, its floor or reference, the target, and PASS / MISS / missing (what was not measured,
and why). --gemm times the model's own matrix multiplications for a 2,048-token prompt on the device at
hand (the floor of the long-prompt target: its GEMM time at the rate this GPU reaches on them); without
it that target says so. Writes the table to <folder>/targets.txt too. Never fails on a number: it reports.

The floors:
- decode: the weights and the batch's K/V read once at the hardware spec's HBM bandwidth
  ((weight bytes + sum of contexts x KV bytes per token) / hbm_bytes_per_s);
- prefill of k prompts: one prompt of the same T tokens in all, measured in the same profile;
- one long prompt: its GEMMs alone (four per layer, at T tokens), timed on this device;
- paged decode kernel: dense SDPA over the same K/V (benchmarks/gpu/gpu_check.py's table).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pandas as pd  # noqa: E402

from calibrate.hardware.hardware import load_hardware  # noqa: E402
from engine.atomic import write_text_atomic  # noqa: E402
from engine.specs.loader import load_model_spec  # noqa: E402

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
MODES = ("graphs", "eager")


@dataclass
class Target:
    name: str
    measured: str
    floor: str
    target: str
    passed: bool | None  # None: not measured

    def line(self) -> str:
        verdict = {True: "PASS", False: "MISS", None: "missing"}[self.passed]
        return f"{verdict:<7} {self.name:<52} {self.measured:<34} {self.floor:<34} {self.target}"


def find(folder: Path, pattern: str) -> Path | None:
    found = sorted(folder.glob(pattern))
    return found[0] if found else None


def raw_profile(results: Path, model: str, mode: str) -> pd.DataFrame | None:
    path = find(results / "profiles", f"*-{model}-{mode}.raw.csv")
    return None if path is None else pd.read_csv(path)


def decode_target(raw: pd.DataFrame | None, model: str, mode: str, hbm: float) -> Target:
    name = f"{model} decode ({mode}), batch 1-32, context <= 512"
    if raw is None:
        return Target(name, "no profile", "", "<= 1.3x floor", None)
    spec = load_model_spec(model)
    element = DTYPE_BYTES[str(raw["dtype"].iloc[0])]
    rows = raw[(raw["kind"] == "decode") & raw["num_decodes"].between(1, 32) & (raw["max_decode_context"] <= 512)]
    if rows.empty:
        return Target(name, "no such decode rows", "", "<= 1.3x floor", None)
    floor = (spec.weight_bytes(element) + rows["sum_decode_context"] * spec.kv_bytes_per_token(element)) / hbm
    ratio = rows["time_s"] / floor
    worst = rows.loc[ratio.idxmax()]
    device = f", device {(rows['device_s'] / floor).max():.2f}x" if "device_s" in rows else ""
    return Target(name, f"worst {ratio.max():.2f}x ({worst['time_s'] * 1e3:.2f} ms{device})",
                  f"HBM floor {floor.min() * 1e3:.3g}-{floor.max() * 1e3:.3g} ms", "<= 1.3x floor",
                  bool(ratio.max() <= 1.3))


def prefill_batch_target(raw: pd.DataFrame | None, model: str, mode: str) -> Target:
    name = f"{model} prefill of k prompts vs one ({mode})"
    if raw is None:
        return Target(name, "no profile", "", "<= +15%", None)
    prefills = raw[raw["kind"] == "prefill"]
    single = prefills[prefills["num_prefills"] == 1].set_index("num_prefill_tokens")["time_s"]
    several = prefills[(prefills["num_prefills"] > 1) & prefills["num_prefill_tokens"].isin(single.index)]
    if several.empty:
        return Target(name, "no k > 1 rows with a 1-prompt twin", "", "<= +15%", None)
    excess = several["time_s"].to_numpy() / single.loc[several["num_prefill_tokens"]].to_numpy() - 1
    worst = several.iloc[int(excess.argmax())]
    return Target(name, f"worst {excess.max():+.1%} ({int(worst['num_prefills'])} x "
                        f"{int(worst['num_prefill_tokens'] // worst['num_prefills'])} tokens)",
                  "1 prompt of the same T tokens", "<= +15%", bool(excess.max() <= 0.15))


def gemm_seconds(model: str, tokens: int, dtype: str) -> float:
    """The model's matrix multiplications for one prompt of `tokens` tokens, timed on the device at hand:
    four per layer (QKV, output, MLP in and out) times its layers, medians of 10 runs each."""
    import torch

    spec = load_model_spec(model)
    cuda = torch.cuda.is_available()
    device, torch_dtype = ("cuda", getattr(torch, dtype)) if cuda else ("cpu", torch.float32)
    width = 2 * spec.ffn_dim if spec.is_gated_mlp else spec.ffn_dim
    shapes = [(spec.hidden_size, spec.q_dim + 2 * spec.kv_dim), (spec.q_dim, spec.hidden_size),
              (spec.hidden_size, width), (spec.ffn_dim, spec.hidden_size)]
    total = 0.0
    for inner, outer in shapes:
        x = torch.randn(tokens, inner, device=device, dtype=torch_dtype)
        w = torch.randn(inner, outer, device=device, dtype=torch_dtype)
        samples = []
        for i in range(13):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                x @ w
                end.record()
                end.synchronize()
                seconds = start.elapsed_time(end) / 1e3
            else:
                began = time.perf_counter()
                x @ w
                seconds = time.perf_counter() - began
            if i >= 3:
                samples.append(seconds)
        total += statistics.median(samples)
    return total * spec.num_layers


def long_prompt_target(raw: pd.DataFrame | None, model: str, mode: str, gemm: bool) -> Target:
    name = f"{model} one long prompt vs its GEMMs ({mode})"
    if raw is None:
        return Target(name, "no profile", "", "<= 1.3x GEMM time", None)
    single = raw[(raw["kind"] == "prefill") & (raw["num_prefills"] == 1)]
    if single.empty:
        return Target(name, "no 1-prompt prefill rows", "", "<= 1.3x GEMM time", None)
    row = single.loc[(single["num_prefill_tokens"] - 2048).abs().idxmin()]
    tokens = int(row["num_prefill_tokens"])
    measured = f"{tokens} tokens: {row['time_s'] * 1e3:.2f} ms"
    if not gemm:
        return Target(name, measured, "GEMM time not measured (--gemm)", "<= 1.3x GEMM time", None)
    floor = gemm_seconds(model, tokens, str(raw["dtype"].iloc[0]))
    ratio = row["time_s"] / floor
    return Target(name, f"{measured} = {ratio:.2f}x", f"GEMMs {floor * 1e3:.2f} ms here", "<= 1.3x GEMM time",
                  bool(ratio <= 1.3))


def fig18a_table(path: Path) -> pd.DataFrame:
    """benchmarks/gpu/fig18a_kernel.py's printed rows (batch, context, dense_us, paged_us, ratio, ...) from its log."""
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        cells = line.split()
        if len(cells) == 8 and all(c.replace(".", "", 1).isdigit() for c in cells):
            rows.append({"batch": int(cells[0]), "context": int(cells[1]), "ratio": float(cells[4])})
    return pd.DataFrame(rows, columns=["batch", "context", "ratio"])


def kernel_target(results: Path) -> Target:
    """From gpu_check.py's kernel_timing.csv, or else from the Fig. 18a stage's log (the same shapes)."""
    name = "paged decode kernel vs dense SDPA, batch 8-32, ctx 64-256"
    path = results / "kernels" / "kernel_timing.csv"
    tables = [pd.read_csv(path)] if path.exists() else []
    tables.append(fig18a_table(results / "fig18a.log"))
    for table in tables:
        if not {"batch", "context", "ratio"} <= set(table.columns):
            continue
        rows = table[table["batch"].between(8, 32) & table["context"].between(64, 256)]
        if not rows.empty:
            return Target(name, f"{rows['ratio'].min():.2f}-{rows['ratio'].max():.2f}x", "dense SDPA, same K/V",
                          "<= 1.3x", bool(rows["ratio"].max() <= 1.3))
    return Target(name, "no timing at these shapes", "dense SDPA", "<= 1.3x", None)


def profile_target(results: Path, model: str, mode: str) -> Target:
    from calibrate.fitting.profile_file import load_profile

    name = f"{model} profile held-out error ({mode})"
    path = find(results / "profiles", f"*-{model}-{mode}.yaml")
    if path is None:
        return Target(name, "no profile", "", "<= 5% mean", None)
    profile = load_profile(path)
    return Target(name, f"mean {profile.heldout_mape:.1%}, p95 {profile.heldout_p95_ape:.1%}", "",
                  "<= 5% mean", bool(profile.heldout_mape <= 0.05))


def validation_target(results: Path, mode: str) -> Target:
    name = f"GPU validation ({mode}): exact; |norm err| mean / max"
    folder = results / f"validation-{mode}"
    if not (folder / "summary.csv").exists():
        return Target(name, "no validation", "", "exact, <= 5% mean, <= 10% each", None)
    summary = pd.read_csv(folder / "summary.csv")
    exact = pd.read_csv(folder / "exact.csv")["identical"].astype(bool).all() if (folder / "exact.csv").exists() \
        else False
    errors = summary["normalized_latency_error"].abs()
    passed = bool(exact and errors.mean() <= 0.05 and errors.max() <= 0.10)
    return Target(name, f"{'exact' if exact else 'NOT exact'}; {errors.mean():.1%} / {errors.max():.1%} "
                        f"({len(summary)} points)", "", "exact, <= 5% mean, <= 10% each", passed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="the session folder (benchmarks/gpu_session.sh's /tmp/gpu_session)")
    parser.add_argument("--hardware", default="h200", help="the spec sheet whose HBM bandwidth sets the decode floor")
    parser.add_argument("--models", nargs=2, default=("opt-13b", "llama-7b"), help="the models profiled")
    parser.add_argument("--gemm", action="store_true", help="time the long prompt's GEMMs on this device")
    parser.add_argument("--note", default="", help="a line printed above the table (e.g. 'CPU dry run')")
    args = parser.parse_args()
    hbm = load_hardware(args.hardware).hbm_bytes_per_s
    first, second = args.models
    targets = [decode_target(raw_profile(args.results, first, m), first, m, hbm) for m in MODES]
    targets += [prefill_batch_target(raw_profile(args.results, first, "graphs"), first, "graphs"),
                long_prompt_target(raw_profile(args.results, first, "graphs"), first, "graphs", args.gemm),
                kernel_target(args.results)]
    targets += [profile_target(args.results, model, mode) for model in (first, second) for mode in MODES]
    targets += [validation_target(args.results, mode) for mode in MODES]
    header = f"{'':<7} {'target':<52} {'measured':<34} {'floor / reference':<34} goal"
    lines = ([args.note] if args.note else []) + [
        f"GPU targets from {args.results} (decode floor at {args.hardware}'s {hbm / 1e12:.2f} TB/s)", header]
    lines += [t.line() for t in targets]
    counts = {v: sum(t.passed is v for t in targets) for v in (True, False, None)}
    lines.append(f"{counts[True]} pass, {counts[False]} miss, {counts[None]} missing")
    text = "\n".join(lines)
    print(text)
    write_text_atomic(args.results / "targets.txt", text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
