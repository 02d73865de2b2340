"""The profiles made from LLMServingSim's bundles (calibrate/profiles/rtx-pro-6000-server.yaml, rtx-4090.yaml), refitted
from the raw bundles: every held-out figure beside its target and the roofline's, and a check that each shipped
file is what a fresh fit writes.

    python research/cost_models/llmservingsim_profiles.py [PERF]

PERF is LLMServingSim's `profiler/perf` folder at commit 5daddb21a545658d5150b535712d0494584b5278 (MIT; the bundles
are not in this repository); default $SERVESIM_LLMSERVINGSIM_PERF. Target: held-out mean |error| <= 5%, as the A100's
(docs/concepts/cost-models.md). Also printed: each shipped profile's Llama-3.1-8B decode beside the bundle's own rows
for it, and, as a sensitivity (not the shipped model), two prefill forms the rows suggest. Deterministic (least
squares, grids, a seeded split). Prints numbers; fails on none (it says where a shipped file differs).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from calibrate.cost_models.profile_model import transferred_roofline  # noqa: E402
from calibrate.fitting.op_fit import fit_linear  # noqa: E402
from calibrate.fitting.profile_file import dump_profile, load_profile  # noqa: E402
from calibrate.hardware.hardware import HardwareSpec, hardware_for_device, load_hardware  # noqa: E402
from calibrate.judging.bundle_import import PERF, BundleImport, import_bundles, linear_heldout, read_gpu_bundles  # noqa: E402
from calibrate.judging.bundle_linear import from_hbm  # noqa: E402
from calibrate.maths.nnls import relative_nnls  # noqa: E402
from calibrate.parts.attention_fit import AttentionWork  # noqa: E402
from calibrate.tables.bundle_attention import bundle_attention  # noqa: E402
from calibrate.tables.bundle_ops import bundle_op_table  # noqa: E402
from engine.core.batch import Batch  # noqa: E402
from engine.specs.loader import load_model_spec  # noqa: E402
from research.cost_models.attention_fit import roofline_errors  # noqa: E402

PROFILES = ("rtx-pro-6000-server", "rtx-4090")
TARGET = 0.05
WAYS = {"by_model": "each model", "by_tp": "each tp degree", "by_octave": "each octave of token counts"}
LAYER_MODULES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "act_fn", "rotary_emb")


def mark(error: float) -> str:
    return f"{error:.1%} ({'meets' if error <= TARGET else 'misses'} <= {TARGET:.0%})"


def refit(name: str, perf: Path) -> tuple[BundleImport, bool]:
    """The fresh import of a shipped profile's bundles, with its command and provenance, and whether it is the file."""
    path = ROOT / "calibrate" / "profiles" / f"{name}.yaml"
    shipped = load_profile(path)
    paths = [perf / bundle.removeprefix(PERF) for bundle in shipped.provenance["bundles"]]
    provenance = {key: shipped.provenance[key] for key in ("source", "licence")}
    fresh = import_bundles(paths, shipped.model, name, shipped.command, provenance)
    fresh.profile.created = shipped.created
    fresh.profile.provenance["bundles"] = shipped.provenance["bundles"]
    return fresh, dump_profile(fresh.profile) == path.read_text()


def l2_rows(result: BundleImport, perf_paths: list[Path], hw: HardwareSpec) -> None:
    """The L2 rule's effect: each held-out figure without it (today's one bandwidth share) and with it, on every row
    as measured and on the rows a real model reads from HBM (calibrate/judging/bundle_linear.py)."""
    linear = result.profile.linear
    if "l2" not in linear:
        return
    bundles, specs, _ = read_gpu_bundles(perf_paths, hw.name)
    ops = pd.concat([bundle_op_table(b, s, linear["max_tokens"]).ops for b, s in zip(bundles, specs)],
                    ignore_index=True)
    today = fit_linear(ops, hw)
    before = linear_heldout(ops, hw, fit_on=fit_linear)
    l2 = linear["l2"]
    print(f"\nL2 rule: {l2['matmul_rows_in_l2']} of {l2['matmul_rows']} matmul rows fit in the "
          f"{l2['l2_cache_bytes'] / 2**20:g} MB L2 (weights and activations); bandwidth share without the rule "
          f"{today.bandwidth_efficiency:.3f}, with it {linear['bandwidth_efficiency']:.3f} (HBM) and "
          f"{linear['resident_bandwidth_efficiency']:.3f} (the L2 rows, never priced); compute "
          f"{today.compute_efficiency:.3f} -> {linear['compute_efficiency']:.3f}, ridge {today.ridge_efficiency:.3f} "
          f"-> {linear['ridge_efficiency']:.3f}, matmul latency {today.gemm_latency_s * 1e6:.1f} -> "
          f"{linear['gemm_latency_s'] * 1e6:.1f} us\n")
    hbm = linear["heldout"]["from_hbm"]
    roofline = hbm.get("roofline", {})
    print("| held out | every row, per iteration: without -> with the rule | matmuls read from HBM, per op: without "
          "-> with | layers all from HBM, per iteration: without -> with | roofline, HBM matmuls / layers |")
    print("|---|---|---|---|---|")
    for way, errors in before.items():
        old, new = from_hbm(errors, hw), hbm[way]
        print(f"| {WAYS[way]} | {errors.summary()['per_iteration']['mape']:.1%} -> "
              f"{linear['heldout'][way]['per_iteration']['mape']:.1%} | {_spread(old, 'matmuls')} -> "
              f"{_spread(new, 'matmuls')} | {_spread(old, 'per_iteration')} -> {_spread(new, 'per_iteration')} | "
              f"{_spread(roofline, 'matmuls')} / {_spread(roofline, 'per_iteration')} |")


def _spread(errors: dict | None, key: str) -> str:
    if not errors or key not in errors:
        return "none"
    e = errors[key]
    return f"{e['mape']:.1%} ({e['signed_mean']:+.1%}, {e['rows']} rows)"


def linear_rows(result: BundleImport) -> None:
    roofline = result.roofline.summary()
    print("| linear part, per iteration (each row as measured) | held out | mean (p95) | roofline mean (p95), same "
          "rows |")
    print("|---|---|---|---|")
    for way, errors in result.heldout.items():
        s = errors.summary()
        print(f"| all | {WAYS[way]} | {mark(s['per_iteration']['mape'])} ({s['per_iteration']['p95_ape']:.1%}) | "
              f"{roofline['per_iteration']['mape']:.1%} ({roofline['per_iteration']['p95_ape']:.1%}) |")
        for regime, value in s.get("per_iteration_by_regime", {}).items():
            print(f"| {regime} | {WAYS[way]} | {value:.1%} | {roofline['per_iteration_by_regime'][regime]:.1%} |")
        for key in ("model", "tp"):
            if way == f"by_{key}":
                for value, mean in errors.layers.groupby(key)["ape"].mean().items():
                    print(f"| {key} {value} held out | {WAYS[way]} | {mean:.1%} | |")


def attention_rows(result: BundleImport, hw: HardwareSpec, perf_paths: list[Path]) -> None:
    bundles, specs, _ = read_gpu_bundles(perf_paths, hw.name)
    tables = [a.table for b, s in zip(bundles, specs) for a in bundle_attention(b, s)]
    weights = [(len(t.decode), len(t.prefill)) for t in tables]
    per_table = [roofline_errors(t, hw) for t in tables]
    roofline = {"decode": np.average([r[0] for r in per_table], weights=[w[0] for w in weights]),
                "prefill": np.average([r[1] for r in per_table], weights=[w[1] for w in weights])}
    roofline["decode_waves"] = roofline["decode"]
    print("\n| attention, per layer | held-out region | held out mean (p95) | 5-fold | in sample | roofline defaults |")
    print("|---|---|---|---|---|---|")
    for kind, e in result.attention.heldout.items():
        if "kfold" in e:  # the mixed rows' judges: below
            held = e["heldout_region"]
            print(f"| {kind} | {e['region']} | {mark(held['mean'])} ({held['p95']:.1%}) | {e['kfold']['mean']:.1%} | "
                  f"{e['in_sample']['mean']:.1%} | {roofline[kind]:.1%} |")
    for label, errors in result.attention.heldout.get("by_table", {}).items():
        print(f"| {label} held out (fitted on the other tables) | the whole table | "
              + ", ".join(f"{k} {v:.1%}" for k, v in errors.items()) + " | | | |")
    mixed_rows(result)
    prefill_variants(tables, hw)


def mixed_rows(result: BundleImport) -> None:
    """The mixed rows by the mixed term (held out, in sample), beside the decode + prefill sum and the roofline."""
    mixed, fit = result.attention.heldout["mixed"], result.attention.mixed

    def text(e: dict) -> str:
        return f"{mark(e['mean'])} (p95 {e['p95']:.1%}, signed {e['signed_mean']:+.1%})"

    print(f"\n| mixed rows ({mixed['sum']['in_sample']['rows']}) | {mixed['region']} held out | every row |")
    print("|---|---|---|")
    if fit is not None:
        print(f"| mixed term: held out, in sample | {text(mixed['heldout_region'])} | {text(mixed['in_sample'])} |")
    for way, label in (("sum", "decode + prefill parts (the price before the term; never fitted)"),
                       ("roofline", "roofline defaults")):
        print(f"| {label} | {text(mixed[way]['heldout_region'])} | {text(mixed[way]['in_sample'])} |")
    for label, errors in result.attention.heldout.get("by_table", {}).items():
        if "mixed" in errors:
            print(f"| {label} held out (fitted on the other tables) | the whole table: mixed term "
                  f"{errors['mixed']:.1%}, decode + prefill {errors['mixed_sum']:.1%} | |")
    if fit is not None:
        floors = ", ".join(f"{f:.3f}" for f in fit.floor_shares)
        miss = "none" if fit.miss_bandwidth_efficiency is None else f"{fit.miss_bandwidth_efficiency:.3f}"
        print(f"\nMixed term fitted on every mixed row: latency {fit.latency_s * 1e6:.1f} us, "
              f"{fit.wave_latency_s * 1e6:.2f} us a wave, {fit.empty_block_s * 1e9:.2f} ns an empty query block, "
              f"the query heads' stream at {fit.bandwidth_efficiency:.3f} of HBM, rereads past the L2 at {miss}; "
              f"{fit.blocks_per_sm} block(s) per SM, floor(s) {floors} x SMs")


def prefill_variants(tables, hw: HardwareSpec) -> None:
    """A sensitivity, not the shipped model: the prefill rows fitted with the causal pair count (a kernel skipping
    the masked half) and a scan term (each block of 128 query rows reading every key, in waves of the GPU's SMs)."""
    columns: dict[str, list] = {k: [] for k in ("latency", "rectangle", "causal", "kv", "output", "scan")}
    time_s, chunk = [], []
    for table in tables:
        p, work = table.prefill, AttentionWork.of_table(table.shape)
        n, c = p["chunk"].to_numpy(float), p["cached"].to_numpy(float)
        blocks = np.ceil(n / 128) * table.shape.q_heads
        flops, bandwidth = work.flops_per_pair / hw.peak_flops, hw.hbm_bytes_per_s
        for key, values in (("latency", np.ones(len(n))), ("rectangle", n * (n + c) * flops),
                            ("causal", n * (n + 2 * c) / 2 * flops),
                            ("kv", (n + c) * work.kv_bytes_per_token / bandwidth),
                            ("output", n * work.output_bytes_per_token / bandwidth),
                            ("scan", np.ceil(blocks / hw.sm_count) * (n + c) * 1e-9)):
            columns[key].append(values)
        time_s.append(p["time_s"].to_numpy())
        chunk.append(p["chunk"].to_numpy())
    joined = {k: np.concatenate(v) for k, v in columns.items()}
    t, chunks = np.concatenate(time_s), np.concatenate(chunk)
    held = chunks >= 0.75 * chunks.max()
    print("\nPrefill forms (a sensitivity; the shipped fit is the first):")
    for pairs, scan in (("rectangle", False), ("causal", False), ("rectangle", True), ("causal", True)):
        names = ["latency", pairs, "kv", "output"] + (["scan"] if scan else [])
        x = np.column_stack([joined[k] for k in names])
        inside = np.abs(x @ relative_nnls(x, t) - t) / t
        region = np.abs(x @ relative_nnls(x[~held], t[~held]) - t) / t
        form = f"{pairs} pairs{' + scan in waves' if scan else ''}"
        print(f"  {form}: largest chunks held out {region[held].mean():.1%}, in sample {inside.mean():.1%}")


def decode_rows(name: str, perf_paths: list[Path]) -> None:
    """The shipped profile's Llama-3.1-8B decode (device only) beside the bundle's own rows for it."""
    llama = next((p for p in perf_paths if "Llama-3.1-8B" in p.as_posix()), None)
    if llama is None:
        return
    bundles, _, hw = read_gpu_bundles([llama], name)
    tp1 = bundles[0].tps[1]
    dense = tp1.dense.set_index(["layer", "tokens"])["time_s"]
    head = tp1.per_sequence.set_index(["layer", "sequences"])["time_s"]
    attention = tp1.attention.set_index(["prefill_chunk", "kv_prefill", "n_decode", "kv_decode"])["time_s"]
    path = ROOT / "calibrate" / "profiles" / f"{name}.yaml"
    cost = transferred_roofline(path, None, load_model_spec("llama-3.1-8b"), hw, 1, 2, 16)
    cost.charge_host = False
    print("\n| Llama-3.1-8B decode, device only | measured rows (ms) | profile (ms) | error |")
    print("|---|---|---|---|")
    for batch in (1, 16, 64, 256):
        for history in (512, 4096):
            layer = (sum(dense[(m, batch)] for m in LAYER_MODULES) + 2 * dense[("layernorm", batch)]
                     + attention[(0, 0, batch, history)])
            measured = (32 * layer + dense[("embedding", batch)] + dense[("final_layernorm", batch)]
                        + head[("lm_head", batch)])
            priced = cost.iteration_time(Batch(decode_seq_ids=list(range(batch)),
                                               decode_context_lens=[history + 1] * batch))
            print(f"| {batch} sequences, {history} tokens of history | {measured * 1e3:.2f} | {priced * 1e3:.2f} | "
                  f"{(priced - measured) / measured:+.1%} |")


def main(argv: list[str]) -> int:
    given = argv[0] if argv else os.environ.get("SERVESIM_LLMSERVINGSIM_PERF")
    if not given or not Path(given).is_dir():
        print("no bundles: give LLMServingSim's profiler/perf folder (or $SERVESIM_LLMSERVINGSIM_PERF); "
              "nothing refitted")
        return 0
    perf = Path(given)
    for name in PROFILES:
        result, same = refit(name, perf)
        hw = load_hardware(hardware_for_device(result.profile.device_name) or name)
        perf_paths = [perf / b.removeprefix(PERF) for b in result.profile.provenance["bundles"]]
        print(f"\n## {name} ({result.profile.device_name}): {', '.join(result.profile.linear['models'])}")
        print(f"shipped file = fresh fit: {'yes' if same else 'NO: refit with the command in its header'}\n")
        linear_rows(result)
        l2_rows(result, perf_paths, hw)
        for label, errors in result.moe.items():
            print(f"\n{label}'s mixture block (moe.csv, {errors['fit']['rows']} rows; judged, not fitted): "
                  + "; ".join(f"{way} {e['mean']:.1%} (p95 {e['p95']:.1%}, signed {e['signed_mean']:+.1%})"
                              for way, e in (("the experts priced from the fitted dense operations", errors["fit"]),
                                             ("the roofline", errors["roofline"]))))
        attention_rows(result, hw, perf_paths)
        decode_rows(name, perf_paths)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
