"""How much of an iteration is the engine's host work, measured on this CPU apart from the device work.

    python research/cost_models/host_split.py [--model opt-125m] [--threads 1] [--replays 3]

Replays calibrate/parts/host.py's calibration trace on the CPU engine with clock="step" (the same replay
`servesim calibrate profile` runs): every iteration's timed forward, and the host work around it
(scheduling, block tables, inputs, sampling's host side, completion, records). Fits calibrate/parts/host.py's
terms on them and prints the host share of a CPU iteration by batch size, then what the fitted terms
add, in series, to the A100 iterations of the shipped A100 profile's transfer at batch 1, 32 and 128.
Prints numbers; fails on none.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from calibrate.cost_models.profile_model import transferred_roofline
from calibrate.fitting.fit import fit_host
from calibrate.hardware.hardware import load_hardware
from calibrate.parts.host import HOST_TERMS, calibration_replay, host_rows, host_time
from engine.core.batch import Batch
from engine.specs.loader import load_model_spec

A100 = Path(__file__).resolve().parents[2] / "calibrate" / "profiles" / "a100-80gb-linear.yaml"


def measure(model: str, replays: int) -> pd.DataFrame:
    """One row per iteration of each replay (the first of each left out): shape, forward and host seconds."""
    from engine.runtime.runner import ModelRunner

    runner = ModelRunner(load_model_spec(model), device="cpu", num_gpu_blocks=256, block_size=16)
    frames = []
    for replay in range(replays):
        _, result, _, forwards = calibration_replay(runner, 16)
        rows = pd.DataFrame(host_rows(result))
        frames.append(rows.assign(forward_s=forwards[1:], replay=replay))
    return pd.concat(frames, ignore_index=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="opt-125m")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--replays", type=int, default=3)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    rows = measure(args.model, args.replays)
    host = fit_host(rows)
    total = rows["time_s"] + rows["forward_s"]
    print(f"{args.model} on this CPU ({args.threads} torch thread(s)), {len(rows)} iterations of "
          f"{args.replays} calibration replays")
    print(f"host work: mean {rows['time_s'].mean() * 1e3:.3f} ms an iteration, "
          f"{rows['time_s'].sum() / total.sum():.2%} of the iterations' time "
          f"(forward mean {rows['forward_s'].mean() * 1e3:.1f} ms)")
    print("fitted: " + ", ".join(f"{term} {host[term] * 1e6:.2f} us" for term in HOST_TERMS)
          + f" (held-out mean |error| {host['heldout_mean_abs_error_s'] * 1e6:.1f} us)")
    bins = pd.cut(rows["num_seqs"], [0, 1, 4, 16, 64, 1 << 20], labels=["1", "2-4", "5-16", "17-64", ">64"])
    by = pd.DataFrame({"seqs": bins, "host": rows["time_s"], "total": total}).groupby("seqs", observed=True)
    for label, group in by:
        print(f"  {label:>5} sequences: {len(group):4d} iterations, host mean {group['host'].mean() * 1e3:.3f} ms "
              f"(median {group['host'].median() * 1e3:.3f}), {group['host'].sum() / group['total'].sum():.2%} "
              "of the iteration")
    opt13b, a100 = load_model_spec("opt-13b"), load_hardware("a100-40gb")
    device = transferred_roofline(A100, None, opt13b, a100, 1, 2, 16)
    device.charge_host = False
    print(f"in series with the A100 transfer of {A100.name} (OPT-13B, A100-40GB, decode at context 512):")
    for batch in (1, 32, 128):
        step = Batch(decode_seq_ids=list(range(batch)), decode_context_lens=[512] * batch)
        added = host_time(host, batch, 0)
        forward = device.iteration_time(step)
        print(f"  batch {batch:3d}: device {forward * 1e3:.2f} ms + host {added * 1e3:.3f} ms "
              f"({added / (forward + added):.2%} of the step)")
    print(f"host_share={rows['time_s'].sum() / total.sum():.4f} "
          + " ".join(f"{term}={host[term]:.3e}" for term in HOST_TERMS))


if __name__ == "__main__":
    main()
