"""The shipped A100 profile against the spec-sheet roofline: held-out errors, OPT-13B iterations, the reference Vidur
comparison (LLaMA-7B, A100-80GB, a decode of 16), and the engine's host work in series.

    python research/cost_models/a100_transfer.py

Reads calibrate/profiles/a100-80gb-linear.yaml (made by `servesim calibrate import`, which printed the same
held-out errors) and the CPU profile whose host terms it carries. Prints numbers; fails on none.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from calibrate.clock.roofline import RooflineCostModel
from calibrate.cost_models.profile_model import ProfileCostModel, transferred_roofline
from calibrate.fitting.profile_file import load_profile
from calibrate.hardware.hardware import load_hardware
from calibrate.parts.host import host_time
from calibrate.parts.linear_model import LinearFit
from engine.core.batch import Batch
from engine.specs.loader import load_model_spec

ROOT = Path(__file__).resolve().parents[2]
A100 = ROOT / "calibrate" / "profiles" / "a100-80gb-linear.yaml"
CPU_WITH_HOST = ROOT / "results/reference/validation/cpu-opt-125m-calibrated/profile/cpu-opt-125m.yaml"
REFERENCE_CONTEXT = 383  # where today's roofline gives the reference comparison's 10.6 ms for a LLaMA-7B decode of 16
# on an A100-80GB


def decode(batch: int, context: int = 512) -> Batch:
    return Batch(decode_seq_ids=list(range(batch)), decode_context_lens=[context] * batch)


def prefill(tokens: int) -> Batch:
    return Batch(prefill_seq_ids=[0], prefill_lens=[tokens], prefill_sample_ids=[(0,)])


def heldout_table(profile) -> None:
    heldout = profile.linear["heldout"]
    columns = [("held out by model", heldout["by_model"]), ("held out by tp", heldout["by_tp"]),
               ("today's roofline", heldout["roofline"])]
    print("| mean abs error | " + " | ".join(name for name, _ in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    first = columns[0][1]

    def row(label, values):
        print(f"| {label} | " + " | ".join(values) + " |")

    row("per iteration (p95)", [f"{s['per_iteration']['mape']:.1%} ({s['per_iteration']['p95_ape']:.1%})"
                                for _, s in columns])
    row("per iteration, signed mean", [f"{s['per_iteration']['signed_mean']:+.1%}" for _, s in columns])
    for band in first["per_iteration_by_tokens"]:
        row(f"per iteration, {band} tokens", [f"{s['per_iteration_by_tokens'][band]:.1%}" for _, s in columns])
    row("per operation, matmuls", [f"{s['per_op_all']['matmuls_mape']:.1%}" for _, s in columns])
    row("per operation, all", [f"{s['per_op_all']['mape']:.1%}" for _, s in columns])
    for op in first["per_op"]:
        row(f"  {op}", [f"{s['per_op'][op]:.1%}" for _, s in columns])


def opt13b_table() -> None:
    opt13b, a100 = load_model_spec("opt-13b"), load_hardware("a100-40gb")
    roofline = RooflineCostModel(opt13b, a100)
    measured = transferred_roofline(A100, None, opt13b, a100, 1, 2, 16)
    shapes = [(f"decode {b} (context 512)", decode(b)) for b in (1, 8, 32, 128)]
    shapes += [(f"prefill {n}", prefill(n)) for n in (128, 512, 2048)]
    print("| OPT-13B, A100-40GB | today's roofline | measured A100 linear part | + host work |")
    print("|---|---|---|---|")
    for label, batch in shapes:
        measured.charge_host = False
        device = measured.iteration_time(batch)
        measured.charge_host = True
        print(f"| {label} | {roofline.iteration_time(batch) * 1e3:.1f} ms | {device * 1e3:.1f} ms "
              f"({device / roofline.iteration_time(batch) - 1:+.0%}) | {measured.iteration_time(batch) * 1e3:.1f} ms |")


def vidur_comparison(profile) -> None:
    spec, hw = load_model_spec("llama-7b"), load_hardware("a100-80gb")
    fit = LinearFit.from_dict(profile.linear)
    headless = replace(spec, vocab_size=0)  # the measurements have no LM head
    nothing = decode(16, context=0)
    measured_linear = profile.token_costs_s[profile.token_knots.index(16)]
    print(f"LLaMA-7B, A100-80GB, a decode of 16: non-attention work measured {measured_linear * 1e3:.2f} ms "
          "(the reference comparison: 9.1 ms); "
          f"today's roofline {RooflineCostModel(headless, hw).iteration_time(nothing) * 1e3:.2f} ms; "
          f"the fitted linear part {RooflineCostModel(headless, hw, linear=fit).iteration_time(nothing) * 1e3:.2f}"
          " ms (without the LM head)")
    roofline = RooflineCostModel(spec, hw)
    transfer = transferred_roofline(A100, None, spec, hw, 1, 2, 16)
    step = decode(16, context=REFERENCE_CONTEXT)
    with_host = transfer.iteration_time(step)
    transfer.charge_host = False
    print(f"  the whole step at context {REFERENCE_CONTEXT}: "
          f"today's roofline {roofline.iteration_time(step) * 1e3:.2f} ms (the reference comparison: 10.6), "
          f"measured linear part {transfer.iteration_time(step) * 1e3:.2f} ms, + host "
          f"{with_host * 1e3:.2f} ms; Vidur 12.0 ms")


def host_split(profile) -> None:
    host = profile.host
    cpu = ProfileCostModel.from_profile(CPU_WITH_HOST)
    cpu.charge_host = False
    print(f"host work ({host['source']}): {host['per_iteration_s'] * 1e3:.3f} ms an iteration + "
          f"{host['per_sequence_s'] * 1e6:.2f} us a sequence + {host['per_prefill_token_s'] * 1e6:.2f} us "
          "a prompt token")
    for label, batch in [(f"decode {b}", decode(b, 64)) for b in (1, 8, 16)] + [("prefill 128", prefill(128))]:
        added = host_time(host, batch.num_seqs, batch.num_prefill_tokens)
        forward = cpu.iteration_time(batch)
        print(f"  CPU OPT-125M {label}: forward {forward * 1e3:.1f} ms, host {added * 1e3:.3f} ms "
              f"({added / (forward + added):.2%} of the iteration)")
    opt13b, a100 = load_model_spec("opt-13b"), load_hardware("a100-40gb")
    device = transferred_roofline(A100, None, opt13b, a100, 1, 2, 16)
    device.charge_host = False
    for b in (1, 32, 128):
        added = host_time(host, b, 0)
        forward = device.iteration_time(decode(b))
        print(f"  A100 OPT-13B decode {b} (context 512): device {forward * 1e3:.2f} ms + host {added * 1e3:.3f} ms "
              f"({added / (forward + added):.2%} of the step)")


def main() -> None:
    profile = load_profile(A100)
    linear = profile.linear
    print(f"{A100.name}: fitted on {len(linear['models'])} models, linear part: compute "
          f"{linear['compute_efficiency']:.3f}, bandwidth {linear['bandwidth_efficiency']:.3f}, "
          f"ridge {linear['ridge_efficiency']:.3f}, matmul latency {linear['gemm_latency_s'] * 1e6:.1f} us")
    heldout_table(profile)
    print()
    opt13b_table()
    print()
    vidur_comparison(profile)
    print()
    host_split(profile)


if __name__ == "__main__":
    main()
