"""Moving a request's KV cache from the GPU that prefilled it to the GPU that decodes it, priced.

A link is one direction of one GPU's connection: `latency_s + bytes / bytes_per_s`. It comes from the spec sheet
(`nvlink`, `pcie`, `infiniband`: the sheet's one-way figure, the most the wire carries, and a fixed latency per
kind), from a public send/recv table fitted per placement (`measured`), or is written out (`custom`).

With tensor parallelism each of the t GPUs holds 1/t of the KV heads and sends its share over its own link, all
at once: the bytes take 1/t of the time, the latency is paid once. Where the prefill and decode replicas differ in
degree, the smaller one's GPUs carry it (each of them sends, or receives, a larger share): pass that.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibrate.hardware.hardware import HardwareSpec
from calibrate.tables.send_recv_table import PLACEMENTS, fit_send_recv, table_path
from engine.core.spec import ModelSpec
from engine.errors import SpecError
from engine.specs.checks import known_keys, number, positive

# Fixed latencies of the spec-sheet links, a send's start-up however few its bytes. NVLink and InfiniBand are the
# DGX H100 send/recv table's fitted latencies (calibrate/network_tables/h100_dgx.send_recv.csv, Vidur: 7.6 us in
# one node, 19 us across two), rounded; the DGX A100 table's are 13 us and 29 us. No table here measures a pair
# joined by PCIe alone: 10 us is an assumption, between the two measured (a PCIe path crosses the host's
# bridge, no switch fabric, no NIC); `kind: custom` sets one measured on the user's own machine.
SPEC_LATENCY_S = {"nvlink": 8e-6, "pcie": 10e-6, "infiniband": 20e-6}
SPEC_FIELDS = {"nvlink": "nvlink_bytes_per_s", "pcie": "pcie_bytes_per_s", "infiniband": "infiniband_bytes_per_s"}
KIND_KEYS = {**{kind: ("kind",) for kind in SPEC_FIELDS},
             "custom": ("kind", "bytes_per_s", "latency_s"), "measured": ("kind", "table", "placement")}
REQUIRED_KEYS = {"custom": ("bytes_per_s", "latency_s"), "measured": ("table",)}
DEFAULT_PLACEMENT = "intra_node"  # a prefill and a decode replica in one node: what a 1P1D pair on one DGX is
KV_ELEMENT_BYTES = 2  # fp16/bf16, the KV cache's default format (calibrate/hardware/precision.py)


@dataclass(frozen=True)
class KVLink:
    """One direction of one GPU's link: a fixed latency, then the bytes at `bytes_per_s`."""
    kind: str
    bytes_per_s: float
    latency_s: float
    source: str  # where the figures come from, for a run's provenance

    def __post_init__(self) -> None:
        if not self.bytes_per_s > 0 or not self.latency_s >= 0:
            raise ValueError(f"a link needs a positive bandwidth and a non-negative latency, got "
                             f"{self.bytes_per_s!r} B/s and {self.latency_s!r} s")

    def transfer_s(self, num_bytes: int, tensor_parallel: int = 1) -> float:
        """Seconds to move `num_bytes` of KV split over `tensor_parallel` GPUs, each sending its 1/t share of
        the heads over its own link in parallel: one latency, then 1/t of the bytes each."""
        if num_bytes < 0 or tensor_parallel < 1:
            raise ValueError(f"a transfer moves a non-negative number of bytes over 1 or more GPUs, got "
                             f"{num_bytes!r} bytes over {tensor_parallel!r}")
        return self.latency_s + num_bytes / (tensor_parallel * self.bytes_per_s)


def kv_bytes(spec: ModelSpec, num_tokens: int, dtype_bytes: int = KV_ELEMENT_BYTES) -> int:
    """A request's whole KV cache, every layer's K and V of `num_tokens` tokens (ModelSpec.kv_bytes_per_token,
    the count the roofline prices decode reads with)."""
    return num_tokens * spec.kv_bytes_per_token(dtype_bytes)


def check_moves_a_token(link: KVLink, token_bytes: int, tensor_parallel: int, within_s: float, within: str,
                        source: str, key: str = "kv_link") -> None:
    """One token's KV (`token_bytes` over `tensor_parallel` GPUs), the least a prompt's copy moves, crosses `link`
    within `within_s` (`within` says what that is). Over a slower link no copy could end inside a run, and a long
    prompt's copy may overflow to infinity: the figure that makes it so is refused, with the least that passes."""
    seconds = link.transfer_s(token_bytes, tensor_parallel)
    if seconds <= within_s:
        return
    gpus = f"{tensor_parallel} GPU{'s' if tensor_parallel > 1 else ''}"
    moves = f"one token's KV ({token_bytes:,} bytes over {gpus}) takes {seconds:.3g} s, longer than {within}"
    given = "" if link.kind == "custom" else f" ({link.source})"
    if link.latency_s >= within_s:
        raise SpecError(source, _figure_key(link, key, "latency_s"),
                        f"{link.latency_s:g} s of latency{given}: {moves}; must be below {within_s:g} s")
    least = _rounded_up(token_bytes / (tensor_parallel * (within_s - link.latency_s)))
    raise SpecError(source, _figure_key(link, key, "bytes_per_s"),
                    f"{link.bytes_per_s:g} B/s{given}: {moves}; must be at least {least:.3g} B/s")


def _figure_key(link: KVLink, key: str, figure: str) -> str:
    """Where a link's figure was written: a custom link's own key, a measured one's table, else the link's kind."""
    return {"custom": f"{key}.{figure}", "measured": f"{key}.table"}.get(link.kind, key)


def _rounded_up(value: float) -> float:
    """`value` up to three significant digits, so that the least figure an error prints passes."""
    scale = 10.0 ** (math.floor(math.log10(value)) - 2)
    return math.ceil(value / scale) * scale


def link_from_spec(hardware: HardwareSpec, kind: str, source: str = "kv_link", key: str = "kv_link") -> KVLink:
    """The sheet's one-way figure for `kind` (nvlink, pcie, infiniband) and that kind's fixed latency."""
    if kind not in SPEC_FIELDS:
        raise SpecError(source, key, f"unknown spec-sheet link {kind!r}; valid are {sorted(SPEC_FIELDS)}")
    bandwidth = getattr(hardware, SPEC_FIELDS[kind])
    if bandwidth is None:
        raise SpecError(source, key, f"{kind} needs {hardware.name}'s sheet to give {SPEC_FIELDS[kind]} "
                                     f"({hardware.sheet or hardware.name} gives none); valid here are "
                                     f"{[k for k in SPEC_FIELDS if getattr(hardware, SPEC_FIELDS[k]) is not None]}, "
                                     f"custom or measured")
    latency = SPEC_LATENCY_S[kind]
    return KVLink(kind, bandwidth, latency, f"{hardware.name} sheet {SPEC_FIELDS[kind]}, {latency * 1e6:g} us")


def link_from_table(table: str, placement: str = DEFAULT_PLACEMENT, source: str = "kv_link",
                    key: str = "kv_link") -> KVLink:
    """A send/recv table's fit at `placement` (intra_node: two GPUs in one node; inter_node: in two)."""
    if placement not in PLACEMENTS:
        raise SpecError(source, f"{key}.placement", f"unknown placement {placement!r}; valid are {sorted(PLACEMENTS)}")
    fit = fit_send_recv(table, placement, source, f"{key}.table")
    return KVLink("measured", fit.bytes_per_s, fit.latency_s,
                  f"{fit.table} send/recv {placement} fit (Vidur), held-out error {fit.heldout_error:.1%}")


def link_from_config(raw: dict | str, hardware: HardwareSpec, source: str, key: str = "kv_link") -> KVLink:
    """A config's `kv_link`: a spec-sheet kind's name (`nvlink`), or a mapping with its `kind`:
    `{kind: infiniband}`, `{kind: custom, bytes_per_s: 2.5e10, latency_s: 1e-5}`,
    `{kind: measured, table: h100_dgx, placement: inter_node}` (placement defaults to intra_node)."""
    if isinstance(raw, str):
        if raw in REQUIRED_KEYS:
            raise SpecError(source, key, f"{raw} needs a mapping with {list(REQUIRED_KEYS[raw])}: "
                                         f"{{kind: {raw}, ...}}")
        return link_from_spec(hardware, _kind(raw, source, key), source, key)
    kind = _checked_mapping(raw, source, key)
    if kind == "custom":
        return KVLink("custom", positive(raw["bytes_per_s"], source, f"{key}.bytes_per_s"),
                      number(raw["latency_s"], source, f"{key}.latency_s", low=0), f"custom ({source})")
    if kind == "measured":
        placement = raw.get("placement", DEFAULT_PLACEMENT)
        if not isinstance(raw["table"], str) or not isinstance(placement, str):
            raise SpecError(source, key, "table and placement are names: a shipped table (or a .csv path) and "
                                         f"one of {sorted(PLACEMENTS)}")
        return link_from_table(raw["table"], placement, source, key)
    return link_from_spec(hardware, kind, source, key)


def link_table_found(raw: Any, source: str, key: str, base_dir: str | Path | None) -> Any:
    """A config's kv_link as written, a measured link's table found as every file a config names is (beside the
    config first: engine/specs/paths.py): the link itself is read later, against the prefill pool's GPU, where the
    config's folder is no longer known."""
    if not isinstance(raw, dict) or raw.get("kind") != "measured" or not isinstance(raw.get("table"), str):
        return raw
    _checked_mapping(raw, source, key)  # a mistyped key is reported before a missing file
    return {**raw, "table": str(table_path(raw["table"], source, f"{key}.table", base_dir))}


def _checked_mapping(raw: Any, source: str, key: str) -> str:
    """A link mapping's kind, its keys that kind's and its required ones there."""
    if not isinstance(raw, dict):
        raise SpecError(source, key, f"must be a link kind or a mapping with its kind; valid kinds are "
                                     f"{sorted(KIND_KEYS)}, got {raw!r}")
    kind = _kind(raw.get("kind"), source, f"{key}.kind")
    known_keys(raw, KIND_KEYS[kind], source, key, note=f"for kind {kind}")
    for name in REQUIRED_KEYS.get(kind, ()):
        if name not in raw:
            raise SpecError(source, f"{key}.{name}", f"missing: kind {kind} needs {list(REQUIRED_KEYS[kind])}")
    return kind


def _kind(kind, source: str, key: str) -> str:
    if kind is None:
        raise SpecError(source, key, f"missing: a link mapping names its kind, one of {sorted(KIND_KEYS)}")
    if not isinstance(kind, str) or kind not in KIND_KEYS:
        raise SpecError(source, key, f"unknown link kind {kind!r}; valid kinds are {sorted(KIND_KEYS)}")
    return kind
