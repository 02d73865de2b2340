"""Point-to-point GPU send/recv times (Vidur's `network/<system>.send_recv.csv`) fitted to a latency and a bandwidth.

A row times one NCCL send from rank 0 to rank 1 of `num_workers` = 2 GPUs, `size` bytes (Vidur's profiler
writes its fp16 tensor's element count times 2; the implied bandwidths agree: an H100 pair in one DGX moves
64 MiB at 348 GB/s, under NVLink 4's 450 GB/s one way, which twice that would exceed), in
`time_stats.send_recv.median` milliseconds of the NCCL kernel (the PyTorch profiler's device time, so no host
launch cost). `devices_per_node` is how many of the two GPUs share a node (`max_devices_per_node`, 8, is the
node's size): 2 is both in one node, joined by NVLink through the NVSwitches (`intra_node`); 1 is one GPU in
each of two nodes, joined by the InfiniBand network (`inter_node`).

The fit is `time = latency + size / bandwidth`, per placement, by least squares in relative error: each
message's miss is divided by its time, so a 2 KiB send weighs as much as a 64 MiB one, and the small messages
set the latency, the large ones the bandwidth. (Least squares in seconds would let the 64 MiB sends alone set
both, and give a negative latency where the line bends; a latency read off the small messages, added to the
large ones' slope, counts twice the start-up that NCCL overlaps with the bytes of a large send: on the DGX A100
pair that misses 64 MiB sends by 29%.) In between, where NCCL switches protocols, the line misses most. The
held-out error fits every other message size and judges that fit on the sizes it did not see.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from calibrate.tables.op_table import MS, check_columns, numeric, read_csv
from engine.errors import SpecError
from engine.specs.paths import Shipped, resolve_path

NETWORK_TABLES_DIR = Path(__file__).resolve().parents[1] / "network_tables"
SUFFIX = ".send_recv.csv"
SHIPPED_TABLES = Shipped(NETWORK_TABLES_DIR, SUFFIX, "calibrate/network_tables", "send/recv table")
TIME_COLUMN = "time_stats.send_recv.median"
REQUIRED_COLUMNS = ("size", TIME_COLUMN, "num_workers", "devices_per_node")
PLACEMENTS = {"intra_node": 2, "inter_node": 1}  # placement -> devices_per_node of the two GPUs
LARGE_BYTES = 8 << 20  # from 8 MiB the bytes are 80% or more of a send's time even over NVLink: a KV cache's sizes
SMALL_BYTES = 64 << 10  # up to 64 KiB the bytes are under a microsecond over NVLink: the latency's sizes


@dataclass(frozen=True)
class SendRecvFit:
    """One placement's send/recv times fitted to `latency_s + bytes / bytes_per_s`, and how well that holds
    on message sizes the fit did not see (median absolute relative error)."""
    table: str
    placement: str
    bytes_per_s: float
    latency_s: float
    heldout_error: float  # over every held-out size
    heldout_error_large: float  # over the held-out sizes of LARGE_BYTES and up, where a KV cache's messages are
    messages: int  # rows fitted


def available_send_recv_tables() -> list[str]:
    return sorted(p.name.removesuffix(SUFFIX) for p in NETWORK_TABLES_DIR.glob(f"*{SUFFIX}"))


def table_path(name_or_path: str | Path, source: str, key: str, base_dir: str | Path | None = None) -> Path:
    """A send/recv table's file: a path (beside the config in `base_dir`, else in the current folder) or a shipped
    table's name (calibrate/network_tables/NAME.send_recv.csv), as engine/specs/paths.py finds every config's file."""
    return resolve_path(name_or_path, base_dir, source, key, SHIPPED_TABLES,
                        what=f"a send/recv table: a .csv with the columns {list(REQUIRED_COLUMNS)} (Vidur's "
                             f"send_recv.csv), or a shipped table's name {available_send_recv_tables()}")


def read_send_recv(path: str | Path, placement: str) -> tuple[np.ndarray, np.ndarray]:
    """(sizes in bytes, seconds) of the two-GPU rows at `placement`, in increasing size."""
    if placement not in PLACEMENTS:
        raise SpecError(str(path), "placement", f"unknown placement {placement!r}; valid are {sorted(PLACEMENTS)}")
    source = str(path)
    table = read_csv(path, "send/recv table")
    check_columns(table, REQUIRED_COLUMNS, source, "send/recv table")
    sizes = numeric(table, "size", source, positive=True)
    seconds = numeric(table, TIME_COLUMN, source, positive=True) * MS
    keep = (numeric(table, "num_workers", source, positive=True) == 2) & (
        numeric(table, "devices_per_node", source, positive=True) == PLACEMENTS[placement])
    if not (sizes[keep] <= SMALL_BYTES).sum() >= 2 or not (sizes[keep] >= LARGE_BYTES).sum() >= 2:
        raise SpecError(source, "devices_per_node", f"too few two-GPU rows at {placement} (devices_per_node "
                                                    f"{PLACEMENTS[placement]}): a fit and its held-out check need "
                                                    f"two messages up to {SMALL_BYTES} bytes and two of "
                                                    f"{LARGE_BYTES} and more")
    order = np.argsort(sizes[keep], kind="stable")
    return sizes[keep][order], seconds[keep][order]


def fit_line(sizes: np.ndarray, seconds: np.ndarray, source: str = "send/recv table") -> tuple[float, float]:
    """(bytes_per_s, latency_s) minimising the squared relative errors of `latency + sizes / bytes_per_s`."""
    terms = np.column_stack([1.0 / seconds, sizes / seconds])  # latency / t + size / (bandwidth t) = 1
    (latency, per_byte), *_ = np.linalg.lstsq(terms, np.ones(len(sizes)), rcond=None)
    if not per_byte > 0 or not latency >= 0:
        raise SpecError(source, TIME_COLUMN,
                        "these times fit no latency >= 0 plus size / bandwidth > 0: do they grow with size?")
    return 1.0 / float(per_byte), float(latency)


def relative_errors(sizes: np.ndarray, seconds: np.ndarray, bytes_per_s: float, latency_s: float) -> np.ndarray:
    return np.abs(latency_s + sizes / bytes_per_s - seconds) / seconds


def fit_send_recv(name_or_path: str, placement: str = "intra_node", source: str = "kv_link",
                  key: str = "table") -> SendRecvFit:
    """The fit over every row of one placement, with the error of a fit on every other message size judged
    on the rest (sizes ranked, the even ranks fitted; a size measured twice stays on one side)."""
    path = table_path(name_or_path, source, key)
    # read once a process, and again if the file changes
    return _fit_file(str(path), path.stat().st_mtime_ns, placement)


@lru_cache(maxsize=32)
def _fit_file(path: str, _modified_ns: int, placement: str) -> SendRecvFit:
    sizes, seconds = read_send_recv(path, placement)
    bytes_per_s, latency_s = fit_line(sizes, seconds, path)
    rank = np.searchsorted(np.unique(sizes), sizes)
    fitted, judged = rank % 2 == 0, rank % 2 == 1
    split_bw, split_latency = fit_line(sizes[fitted], seconds[fitted], path)
    errors = relative_errors(sizes[judged], seconds[judged], split_bw, split_latency)
    large = sizes[judged] >= LARGE_BYTES
    return SendRecvFit(table=Path(path).name.removesuffix(SUFFIX), placement=placement, bytes_per_s=bytes_per_s,
                       latency_s=latency_s, heldout_error=float(np.median(errors)),
                       heldout_error_large=float(np.median(errors[large])), messages=int(len(sizes)))
