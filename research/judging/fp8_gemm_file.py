"""The shipped FP8 GEMM fit (calibrate/gemm_tables/h100_fp8.fit.yaml) made from the shipped table beside it.

It prices the kernel vLLM runs for a W8A8 FP8 checkpoint with per-tensor (or per-channel) weight scales on a
Hopper GPU: CUTLASS scaled_mm (FlashInfer's FP8 GEMM, first in vLLM's list, asks compute capability 100), with
the activations quantized per token before each GEMM. Two shares the rows cannot tell are held at the spec-sheet
roofline's, as the simulator charged them before, and the rest is fitted around them (HELD):
- the compute share: the rows stop at M = 256, where the GEMMs are still at or below the ridge; they bound the
  share from below, but left free the fit runs it to the sheet's peak, its bound;
- the quantization's bandwidth share: its rows move at most 2 MB, where any share from 0.3 to 1 fits them within
  0.3 points of error; its latency is what they measure.
`python research/cost_models/fp8_gemm.py --write` makes the file again; a test holds the shipped file to what this
makes of the shipped table.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from calibrate.clock.roofline import RooflineParams
from calibrate.hardware.hardware import HardwareSpec, load_hardware
from calibrate.parts.fp8_gemm import FORMAT, H100_FP8_FIT
from research.judging.fp8_gemm_fit import Held, fit_fp8_gemms
from research.judging.fp8_gemm_heldout import each_shape, largest_m
from research.judging.gemm_table import H100_FP8, kernel_rows, read_gemm_table

PRICED_KERNEL = "cutlass_scaled_mm_per_tensor"
MEASURED_ON = "h100-sxm"
HELD = Held(RooflineParams().compute_efficiency, RooflineParams().bandwidth_efficiency)
SOURCES = {
    "vllm-pr-49363": "vllm-project/vllm pull request #49363 (HDCharles, 2026-07-21), its description's 'H100 "
                     "benchmarks for google/gemma-4-31B-it': benchmarks/kernels/benchmark_fp8_gemm.py's TFLOP/s "
                     "(triton do_bench_cudagraph medians), columns fp8-tensor-w-token-a and "
                     "fp8-tensor-w-tensor-a-noquant",
    "vllm-deepgemm-readme": "vllm-project/vllm benchmarks/kernels/deepgemm/README.md at commit "
                            "06218c0b4dc7677fe0572fc1ae8c86824ce99e96, its 'vLLM CUTLASS Implementation' table "
                            "(NVIDIA H100 80GB HBM3; block-scaled, judged but not priced)",
}
LICENCE = ("vLLM is Apache-2.0 (calibrate/gemm_tables/LICENSE.vllm); the PR description states no licence of its "
           "own. Only the published numbers are kept, with their source; no vLLM code or text is shipped.")


def fp8_gemm_file(table: Path = H100_FP8, hw: HardwareSpec | None = None) -> dict:
    """The fit file's content: the priced kernel's fit on every row of it, and each held-out fold's figures."""
    hw = hw or load_hardware(MEASURED_ON)
    rows = kernel_rows(read_gemm_table(table), PRICED_KERNEL)
    fit = fit_fp8_gemms(rows, hw, HELD)
    folds = (largest_m(rows, hw, HELD), each_shape(rows, hw, HELD))
    return {"format": FORMAT, "kernel": PRICED_KERNEL, "measured_on": hw.name, "table": table.name,
            "rows": len(rows), "held": asdict(HELD), "fit": fit.to_dict(),
            "heldout": {fold.name: fold.summary() for fold in folds},
            "provenance": {"sources": {s: SOURCES[s] for s in sorted({r.source for r in rows})},
                           "licence": LICENCE}}


def write_fp8_gemm_file(path: Path = H100_FP8_FIT) -> dict:
    import yaml

    content = fp8_gemm_file()
    header = (f"# FP8 (W8A8) GEMMs on an NVIDIA H100 SXM: vLLM's {PRICED_KERNEL}, fitted on {content['rows']} "
              "published timings (calibrate/gemm_tables/README.md)\n"
              "# made by: python research/cost_models/fp8_gemm.py --write\n")
    path.write_text(header + yaml.safe_dump(content, sort_keys=False, width=100))
    return content
