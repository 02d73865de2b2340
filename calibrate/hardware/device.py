"""Which device a profile describes: the GPU's name, or the CPU's model.

A profile describes one device; on another the same shapes cost other times (a batched decode on
one x86 CPU cost a quarter more than the profile of another predicted, while the speed probe's two
shapes cost about the same on both). So a profile records the name and a validation compares it
with the device at hand. No torch import for a CPU.
"""
from __future__ import annotations

import platform


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: str) -> str:
    """'NVIDIA H200' for a CUDA device, the CPU's model otherwise."""
    if str(device).startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return cpu_model()
