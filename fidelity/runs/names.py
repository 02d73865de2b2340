"""A real run's model and GPU, named as servesim ships them: a model id (Hugging Face's) to a model spec, a GPU's
name to a hardware sheet. Add a row to MODEL_NAMES for another model; a GPU is found by the names its sheet lists
(`device_names`, as the driver reports them). Where none matches, --config (or --set model=... hardware=...) says
what to simulate, and the reason is one line."""
from __future__ import annotations

from calibrate.hardware.hardware import available_hardware, hardware_for_device
from engine.specs.loader import available_models

# Hugging Face model id -> shipped model spec (engine/specs/models/<name>.yaml); an instruct tune has its base's shape
MODEL_NAMES = {
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "qwen3-30b-a3b",
}
# LLMServingSim names its GPUs in its own words (a bench run's config.json) -> shipped hardware sheet. Its RTXPRO6000
# is the Server Edition: its run configs give 1,597 GB/s of memory bandwidth (the Workstation Edition has 1,792), and
# its profiles of that GPU name the Server Edition as their device (profiler/perf/RTXPRO6000/*/bf16/meta.yaml)
LLMSERVINGSIM_GPUS = {"RTX4090": "rtx-4090", "RTXPRO6000": "rtx-pro-6000-server", "A100": "a100-80gb",
                      "H100": "h100-sxm"}


def model_name(model_id: str | None) -> tuple[str | None, str]:
    """The shipped model for a run's model id, or None and why not."""
    if model_id is None:
        return None, "the run does not record its model"
    name = MODEL_NAMES.get(model_id)
    if name is None:
        return None, f"no shipped model is known for {model_id!r} (known: {sorted(MODEL_NAMES)})"
    if name not in available_models():
        return None, f"{model_id!r} is servesim's model {name!r}, which this version does not ship"
    return name, f"{model_id} (the run)"


def hardware_name(gpu_name: str | None) -> tuple[str | None, str]:
    """The shipped sheet for a run's GPU, or None and why not."""
    if gpu_name is None:
        return None, "the run does not record its GPU"
    by_driver = hardware_for_device(gpu_name)
    if by_driver is not None:
        return by_driver, f"{gpu_name} (the run)"
    sheet = LLMSERVINGSIM_GPUS.get(gpu_name.strip())
    if sheet is not None and sheet in available_hardware():
        return sheet, f"{gpu_name} (the run, in LLMServingSim's words)"
    if sheet is not None:
        return None, f"the run's GPU {gpu_name!r} is servesim's {sheet!r}, whose sheet this version does not ship"
    return None, f"no shipped hardware sheet names the run's GPU {gpu_name!r} among its device_names"
