"""Accelerators as spec-sheet numbers: shipped sheets are package data in calibrate/hardware_specs/."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from engine.errors import SpecError
from engine.specs.checks import known_keys, number, positive, positive_int
from engine.specs.loader import read_named_yaml
from engine.specs.paths import Shipped

HARDWARE_DIR = Path(__file__).resolve().parents[1] / "hardware_specs"
SHIPPED_SHEETS = Shipped(HARDWARE_DIR, ".yaml", "calibrate/hardware_specs", "hardware sheet")
GIB = 1 << 30
OPTIONAL_KEYS = ("device_names", "infiniband_bytes_per_s", "peak_flops_fp8", "sm_count", "l2_cache_bytes")
MAX_MEMORY_GIB = 2.0**20  # a PiB per device: far past any accelerator, and still a whole number of bytes
MAX_SM_COUNT = 4096  # far past any accelerator's multiprocessors (B200: 148 per die)


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    peak_flops: float  # dense fp16/bf16 FLOP/s
    hbm_bytes_per_s: float
    memory_gib: float
    nvlink_bytes_per_s: float  # one direction
    pcie_bytes_per_s: float  # one direction, host <-> device
    # what the driver calls the part (torch.cuda.get_device_name), so that a profile measured on one is matched to
    # its sheet by its device_name: adding a GPU is its sheet alone
    device_names: tuple[str, ...] = ()
    # streaming multiprocessors (the datasheet's or the architecture whitepaper's count): a kernel's thread
    # blocks run on them in waves (calibrate/parts/attention_waves.py); None where no source gives it
    sm_count: int | None = None
    # dense FP8 tensor-core FLOP/s (no sparsity) where the datasheet gives one: FP8 weights run W8A8 at it, measured
    # FP8 GEMMs at their share of it (calibrate/hardware/precision.py); None on a part without FP8 tensor cores
    peak_flops_fp8: float | None = None
    # the node's network link per GPU, one direction, where the system's datasheet gives one NIC per GPU (DGX
    # A100: ConnectX-6 HDR 200 Gb/s; DGX H100/H200: ConnectX-7 NDR 400 Gb/s): a request's KV crosses it between
    # nodes (calibrate/parts/kv_link.py); None where no source gives the part's NIC
    infiniband_bytes_per_s: float | None = None
    # the L2 cache the SMs share, in bytes, as the architecture whitepaper gives it: a one-layer profile's small
    # weights can stay in it between timed repetitions (calibrate/fitting/l2_resident.py), and a mixed step's query
    # heads reread a group's keys from it (calibrate/parts/attention_mixed.py); None where no source gives it
    l2_cache_bytes: int | None = None
    # the file the sheet was read from, for a message that points at it (a user's own sheet is not in
    # calibrate/hardware_specs/); no figure of the part, so no key of a sheet, and two equal sheets are equal
    sheet: str = field(default="", compare=False, repr=False)

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)

    @property
    def serving_gpu(self) -> tuple[float, tuple[str, ...]]:
        """(memory GiB, driver names): what a V1 system derives its token budget and batch size from
        (engine.specs.loader.system_from_dict)."""
        return self.memory_gib, tuple(self.device_names) or (self.name,)


def available_hardware() -> list[str]:
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.yaml"))


def hardware_from_dict(raw: dict, source: str) -> HardwareSpec:
    if not isinstance(raw, dict):
        raise SpecError(source, "", "a hardware spec must be a mapping")
    known = {f.name for f in fields(HardwareSpec)} - {"sheet"}
    known_keys(raw, sorted(known), source)
    for key in sorted(known - set(raw) - set(OPTIONAL_KEYS)):
        raise SpecError(source, key, "missing required key")
    if not isinstance(raw["name"], str) or not raw["name"].strip():
        raise SpecError(source, "name", f"must be a non-empty label, got {raw['name']!r}")
    values = {k: positive(raw[k], source, k) for k in sorted(known - {"name", "memory_gib", *OPTIONAL_KEYS})}
    values["memory_gib"] = number(raw["memory_gib"], source, "memory_gib", low=0, low_open=True, high=MAX_MEMORY_GIB)
    sm_count = raw.get("sm_count")
    if sm_count is not None:
        sm_count = number(sm_count, source, "sm_count", low=1, high=MAX_SM_COUNT, whole=True)
    fp8 = raw.get("peak_flops_fp8")
    if fp8 is not None:
        fp8 = positive(fp8, source, "peak_flops_fp8")
    infiniband = raw.get("infiniband_bytes_per_s")
    if infiniband is not None:
        infiniband = positive(infiniband, source, "infiniband_bytes_per_s")
    l2 = raw.get("l2_cache_bytes")
    if l2 is not None:
        l2 = positive_int(l2, source, "l2_cache_bytes")
    return HardwareSpec(name=raw["name"], device_names=_device_names(raw.get("device_names", []), source),
                        sm_count=sm_count, peak_flops_fp8=fp8, infiniband_bytes_per_s=infiniband, l2_cache_bytes=l2,
                        sheet=source, **values)


def _device_names(names, source: str) -> tuple[str, ...]:
    if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
        raise SpecError(source, "device_names", f"must be a list of the names the driver reports, got {names!r}")
    return tuple(n.strip() for n in names)


def hardware_for_device(device_name: str) -> str | None:
    """The shipped sheet whose device_names include a profiled device's name (as the driver reported it, e.g.
    'NVIDIA A100-SXM4-80GB' -> 'a100-80gb'), ignoring case and spacing; None where no sheet names it."""
    wanted = _flat(device_name)
    return next((name for name in available_hardware()
                 if any(_flat(n) == wanted for n in load_hardware(name).device_names)), None)


def _flat(name: str) -> str:
    return " ".join(name.lower().split())


def load_hardware(name_or_path: str | Path) -> HardwareSpec:
    """Shipped hardware by name (calibrate/hardware_specs/NAME.yaml) or any hardware YAML by path."""
    return hardware_from_dict(*read_named_yaml(HARDWARE_DIR, name_or_path, "hardware"))
