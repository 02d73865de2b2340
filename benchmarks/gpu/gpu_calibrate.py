"""The whole GPU calibration job in one call: profile, fit, report, for each model.

Runs on the device machine (torch, triton, numpy, pandas, pyyaml; no simpy needed):
    PYTHONPATH=. python benchmarks/gpu/gpu_calibrate.py --models opt-13b llama-13b
Writes under $OUT (or ./results/gpu_calibrate): <device>-<model>.raw.csv, <device>-<model>.yaml
(the profile, held-out error inside), <device>-<model>.png (predicted vs measured), and
summary.txt with the fit error table. With --cuda-graphs on or off the engine profiled decodes through
CUDA graphs or eagerly, and the files are named <device>-<model>-graphs.* or -eager.*; the raw CSV
carries time_s, device_s and host_s for every shape. Without CUDA it runs the same path on the CPU with
a tiny model and grid, so the script is known to work before a GPU is at hand (on a CPU the engine is
eager whatever --cuda-graphs says, and the files are named as asked).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from calibrate.cli import fit_report, parse_block_sizes  # noqa: E402
from calibrate.fitting.fit import fit_and_save  # noqa: E402
from calibrate.profiling.profile import profile, save_raw  # noqa: E402
from engine.atomic import write_text_atomic  # noqa: E402
from engine.runtime.options import parse_cuda_graphs  # noqa: E402
from engine.specs.loader import load_model_spec  # noqa: E402


def device_tag(raw) -> str:
    name = str(raw["device_name"].iloc[0]).lower()
    for tag in ("h200", "h100", "a100", "l40", "a10"):
        if tag in name:
            return tag
    return str(raw["device"].iloc[0])


MODE_SUFFIX = {True: "-graphs", False: "-eager", None: ""}


def calibrate_one(model: str, device: str, grid: str, repeats: int, out: Path, backend: str = "auto",
                  block_sizes: tuple[int, ...] = (), cuda_graphs: str = "auto") -> str:
    started = time.perf_counter()
    graphs = parse_cuda_graphs(cuda_graphs)
    raw = profile(load_model_spec(model), device=device, grid=grid, repeats=repeats, attention_backend=backend,
                  block_sizes=block_sizes, cuda_graphs=graphs)
    stem = f"{device_tag(raw)}-{model}{MODE_SUFFIX[graphs]}"
    save_raw(raw, out / f"{stem}.raw.csv")
    sweep = f" --block-sizes {','.join(map(str, block_sizes))}" if block_sizes else ""
    command = (f"PYTHONPATH=. python benchmarks/gpu/gpu_calibrate.py --models {model} --grid {grid} --repeats {repeats}"
               f" --backend {backend} --cuda-graphs {cuda_graphs}{sweep}")
    result = fit_and_save(raw, f"{stem}.raw.csv", command, out / f"{stem}.yaml")
    by_kind = result.predictions.groupby("kind")["ape"].agg(["mean", "max", "count"])
    mode = "CUDA graphs" if bool(raw["cuda_graphs"].iloc[0]) else "eager"
    report = (f"{stem}: engine {mode}\n{fit_report(result.profile)}\nheld-out error by kind:\n{by_kind.to_string()}\n"
              f"profile + fit took {time.perf_counter() - started:.0f} s\n")
    print(report, flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", default=None)
    parser.add_argument("--grid", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backend", default="auto", choices=("auto", "torch", "triton"),
                        help="attention kernels: auto (Triton on CUDA), or the torch references")
    parser.add_argument("--block-sizes", type=parse_block_sizes, default=(),
                        help="also time decodes and swaps at these block sizes, e.g. 1,4,16,64,256 (fits the cost "
                             "per KV block and per swap copy)")
    parser.add_argument("--cuda-graphs", default="auto", choices=("auto", "on", "off"),
                        help="decodes through CUDA graphs (on), eagerly (off), or as the device allows (auto)")
    args = parser.parse_args()
    import torch

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    models = args.models or (["opt-13b", "llama-13b"] if cuda else ["opt-tiny"])
    grid = args.grid or ("default" if cuda else "tiny")
    out = Path(os.environ.get("OUT") or "results/gpu_calibrate")
    print(f"device {device}: {torch.cuda.get_device_name() if cuda else 'cpu'}; models {models}; grid {grid}",
          flush=True)
    reports = [calibrate_one(model, device, grid, args.repeats, out, args.backend, args.block_sizes, args.cuda_graphs)
               for model in models]
    summary = out / "summary.txt"  # several calls (a model and mode each) share the folder: append
    earlier = summary.read_text() if summary.exists() else ""
    write_text_atomic(summary, earlier + "\n".join(reports))


if __name__ == "__main__":
    main()
