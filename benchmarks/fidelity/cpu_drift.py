"""How steady is this machine? Time the same engine iterations again and again.

Fidelity on a CPU can be no better than the machine is steady. This times two fixed
iterations of OPT-125M (a decode of one sequence at context 16, a 64-token prefill) every
few seconds for a while, on one torch thread as the validation config runs, and prints the
spread. Ends with: decode_spread=<float> prefill_spread=<float> (max/min - 1).

--back-to-back N instead times N single decodes one right after another and prints their
std/mean: the jitter a cost model's per-iteration error cannot get under on this machine.
Ends with: back_to_back_cv=<float>.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--every-s", type=float, default=5.0)
    parser.add_argument("--back-to-back", type=int, default=0, metavar="N")
    args = parser.parse_args()
    import torch

    from engine.runtime.runner import ModelRunner
    from engine.specs.loader import load_model_spec

    torch.set_num_threads(1)
    runner = ModelRunner(load_model_spec("opt-125m"), "cpu", num_gpu_blocks=64, num_cpu_blocks=0,
                         attention_backend="torch")
    if args.back_to_back:
        times = [t * 1e3 for t in runner.time_batch([], [64], repeats=args.back_to_back, warmup=5)]
        cv = statistics.pstdev(times) / statistics.mean(times)
        print(f"{len(times)} decodes (1 sequence, context 64) back to back: median {statistics.median(times):.1f} ms, "
              f"min {min(times):.1f}, max {max(times):.1f}, std/mean {cv:.3f}")
        print(f"back_to_back_cv={cv:.4f}")
        return
    samples = {"decode": [], "prefill": []}
    shapes = {"decode": ([], [16]), "prefill": ([64], [])}
    deadline = time.monotonic() + args.minutes * 60
    while time.monotonic() < deadline:
        for name, (prefill, decode) in shapes.items():
            samples[name].append(statistics.median(runner.time_batch(prefill, decode, repeats=3)) * 1e3)
        print(f"{time.strftime('%H:%M:%S')}  decode {samples['decode'][-1]:7.1f} ms  "
              f"prefill {samples['prefill'][-1]:7.1f} ms", flush=True)
        time.sleep(args.every_s)
    for name, values in samples.items():
        cv = statistics.pstdev(values) / statistics.mean(values)
        print(f"{name}: {len(values)} samples, min {min(values):.1f} ms, median {statistics.median(values):.1f} ms, "
              f"max {max(values):.1f} ms, max/min {max(values) / min(values):.2f}, std/mean {cv:.3f}")
    print(" ".join(f"{name}_spread={max(v) / min(v) - 1:.3f}" for name, v in samples.items()))


if __name__ == "__main__":
    main()
