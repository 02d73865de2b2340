"""The paper's Figs. 18a and 19a as the cost model prices them (no device needed).

Fig. 19a: bringing back a preempted sequence (default 512 tokens of OPT-13B on one A100-40GB),
recomputed (a prefill of its tokens) or swapped out and in, at block sizes 1-256, from the roofline's
defaults. Fig. 18a: one layer's decode attention, paged against dense, at the paper's shapes.
Both tables come from sim/reproduce/ablations.py, which `servesim reproduce` reads too.

    PYTHONPATH=. python research/paper/fig19a_cost_model.py [--model opt-13b] [--hardware a100-40gb] [--tokens 512]
"""
from __future__ import annotations

import argparse

from calibrate.hardware.hardware import load_hardware
from engine.specs.loader import load_model_spec
from sim.reproduce.ablations import FIG19A_TOKENS, fig18a_frame, fig19a_frame, roofline_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="opt-13b")
    parser.add_argument("--hardware", default="a100-40gb")
    parser.add_argument("--tokens", type=int, default=FIG19A_TOKENS, help="length of the preempted sequence")
    args = parser.parse_args()
    model, hw = load_model_spec(args.model), load_hardware(args.hardware)
    curves = fig19a_frame(roofline_at(model, hw), tokens=args.tokens)
    print(f"Fig. 19a from the roofline: a {args.tokens}-token {model.name} sequence on {hw.name} (ms)")
    print(curves.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    wins = curves[curves["swap_in_out_ms"] < curves["recompute_ms"]]["block_size"]
    print(f"swap in+out beats recompute from block size {wins.min() if len(wins) else 'none'}")
    kernel = fig18a_frame(model, hw)
    print(f"\nFig. 18a from the roofline: one layer of {model.name} decode attention on {hw.name} (us)")
    print(kernel.to_string(index=False, float_format=lambda v: f"{v:.2f}"))


if __name__ == "__main__":
    main()
