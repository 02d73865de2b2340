"""A serving engine's mechanisms on top of a cost model's device and host parts.

The kinds (roofline, profile, transfer) price an iteration as the GPU's kernels plus the engine's host work in
series, as an engine that schedules synchronously and launches eagerly runs it. An engine like vLLM V1 changes two
things about that sum, each stated by its engine model (calibrate/parts/host_model.py's `engine:` section) and each
switched off by a config to give the kind's own time back, to the bit:

- **overlap** (asynchronous scheduling): the host schedules and prepares step k + 1 and processes step k - 1's
  outputs while the GPU runs step k (vLLM's `EngineCore.step_with_batch_queue`, two batches in flight), so an
  iteration takes the longer of the two, not their sum: max(device, host). It applies where the system schedules
  asynchronously (SystemSpec.async_scheduling).
- **serial host work**: under overlap, the engine model may name host terms that stay in series with the GPU (the
  step's synchronisation and launches that no batch queue hides): an iteration then takes max(device, the other
  host work) + those terms.
- **CUDA-graph padding**: an iteration of at most the largest captured size replays the graph of the smallest
  captured size that holds it (calibrate/parts/cuda_graphs.py), so its linear layers, all-reduces and per-token
  kernels run on the padded token count. Attention and the LM head see the real requests. Priced as the base's
  token-dependent device time at the padded count less that at the real count (`token_time`, which the roofline
  kinds give); a kind that cannot price it apart (a fitted engine profile, which measured its own engine) is left
  as it is, and the source says so.

In a decode stretch every step runs the same tokens and the same sequences, so the padding and the host time are
the same each step; a stretch is priced from the base's stretch times with the same arithmetic as a single step
(`_combine`), so the two give the same floats.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from calibrate.clock.breakdown import IterationTime
from calibrate.clock.costmodel import BatchLike, CostModel, PricedOnBase
from calibrate.parts.cuda_graphs import padded_tokens


class EngineCostModel(PricedOnBase):
    """`base`'s iteration, with the host's work overlapping the GPU's (overlap) and the linear layers run at the
    CUDA graph's padded size (graph_sizes; empty: eager)."""

    def __init__(self, base: CostModel, overlap: bool, graph_sizes: tuple[int, ...] = (),
                 serial: Callable[[int, int], float] | None = None):
        """serial: the seconds of the host work that stays in series with the GPU under overlap, for a batch's
        sequences and prompt tokens (an engine model's serial terms); None: all of it overlaps."""
        self.base, self.overlap, self.serial = base, overlap, serial
        self.graph_sizes = graph_sizes if callable(getattr(base, "token_time", None)) else ()
        self.prices_ahead = base.prices_ahead
        self.named_host_terms = base.named_host_terms
        notes = []
        if overlap:
            notes.append("host work overlapping the GPU's (asynchronous scheduling)")
        if graph_sizes and self.graph_sizes:
            notes.append(f"CUDA graphs padding iterations of up to {graph_sizes[-1]} tokens to {len(graph_sizes)} "
                         "captured sizes")
        elif graph_sizes:
            notes.append("CUDA-graph padding not priced (this kind measured its own engine's iterations)")
        self.source = base.source + "".join(f"; {note}" for note in notes)
        self.label = base.label

    # --- one iteration ----------------------------------------------------------------------------------------
    def padding_time(self, batch: BatchLike) -> float:
        """The device seconds the graph's padding rows add: 0 for an eager iteration or one of a captured size."""
        if not self.graph_sizes:
            return 0.0
        tokens = batch.num_tokens
        padded = padded_tokens(tokens, self.graph_sizes)
        if padded == tokens:
            return 0.0
        model = self.base.model_for(batch) if hasattr(self.base, "model_for") else self.base
        rows = batch.num_logit_rows
        return model.token_time(padded, rows) - model.token_time(tokens, rows)

    def serial_time(self, batch: BatchLike) -> float:
        return self.serial(batch.num_seqs, batch.num_prefill_tokens) if self.overlap and self.serial else 0.0

    def parts(self, batch: BatchLike) -> tuple[float, float, float]:
        """What _combine adds to the base's time of `batch`: its host work, padding and serial host work."""
        return self.base.host_time(batch), self.padding_time(batch), self.serial_time(batch)

    def iteration_time(self, batch: BatchLike) -> float:
        return self._combine(self.base.iteration_time(batch), self.base.host_time(batch), self.padding_time(batch),
                             self.serial_time(batch))

    def _combine(self, total, host: float, padding: float, serial: float):
        """The iteration from the base's time (its device part plus its host work in series), the host work, the
        padding and the host work that stays in series: padded in series where the host does not overlap, else the
        longer of the padded device part and the overlapped host work, then the serial work. Floats or a stretch's
        arrays alike."""
        if not self.overlap:
            return total + padding if padding else total
        device = total - host if host else total
        if padding:
            device = device + padding
        overlapped = host - serial if serial else host
        longer = (np.maximum(device, overlapped) if isinstance(device, np.ndarray)
                  else (device if device >= overlapped else overlapped))
        return longer + serial if serial else longer

    def device_time(self, batch: BatchLike) -> float:
        padding = self.padding_time(batch)
        device = self.base.device_time(batch)
        return device + padding if padding else device

    def host_time(self, batch: BatchLike) -> float:
        """The host work left exposed: all of it in series; under overlap the serial work and what of the rest the
        device part does not hide."""
        host = self.base.host_time(batch)
        if not self.overlap:
            return host
        serial = self.serial_time(batch)
        return max(host - serial - self.device_time(batch), 0.0) + serial

    def swap_time(self, num_blocks: int) -> float:
        return self.base.swap_time(num_blocks)

    def breakdown(self, batch: BatchLike) -> IterationTime:
        """The base's breakdown with the padding a device kind of its own, and under overlap the host terms
        scaled to the part the device does not hide (so device_s + host_s is the iteration, within rounding)."""
        base = self.base.breakdown(batch)
        padding = self.padding_time(batch)
        device = dict(base.device)
        if padding:
            device["graph_padding"] = padding
        device_s = base.device_s + padding if padding else base.device_s
        if not self.overlap or not base.host_s:
            return IterationTime(device, dict(base.host), device_s, base.host_s, base.swap_s,
                                 parts_exact=base.parts_exact and not padding)
        serial = self.serial_time(batch)
        exposed = max(base.host_s - serial - device_s, 0.0) + serial
        share = exposed / base.host_s
        return IterationTime(device, {term: value * share for term, value in base.host.items()}, device_s, exposed,
                             base.swap_s, parts_exact=False)

    # --- a decode stretch: the same tokens and sequences every step ---------------------------------------------
    def decode_iteration_times(self, batch: BatchLike, num_steps: int) -> np.ndarray:
        totals = self.base.decode_iteration_times(batch, num_steps)
        return np.asarray(self._combine(totals, self.base.host_time(batch), self.padding_time(batch),
                                        self.serial_time(batch)), dtype=float)

    def decode_step_times(self, batch: BatchLike, num_steps: int) -> np.ndarray:
        times = self.decode_iteration_times(batch, num_steps)
        swaps = batch.num_swap_blocks
        return times + self.swap_time(swaps) if swaps else times

    def decode_step_time_list(self, batch: BatchLike, num_steps: int) -> list[float]:
        """A short stretch on Python floats, each the same float a single step gives (iteration_time)."""
        totals = self.base.decode_step_time_list(batch, num_steps) if not batch.num_swap_blocks else None
        if totals is None:
            return self.decode_step_times(batch, num_steps).tolist()
        host, padding, serial = self.base.host_time(batch), self.padding_time(batch), self.serial_time(batch)
        return [self._combine(total, host, padding, serial) for total in totals]

    # --- several stretches or iterations: the host work and padding once for each run of them with the same tokens,
    # sequences, logit rows and prompt tokens, which is all they read (as a decode stretch's steps share them)
    def decode_step_time_lists(self, stretches: Sequence[tuple[BatchLike, int]]) -> list[list[float]]:
        if any(batch.num_swap_blocks for batch, _ in stretches):
            return super().decode_step_time_lists(stretches)
        combine = self._combine
        lists = []
        parts = _Parts(self)
        for (batch, _), totals in zip(stretches, self.base.decode_step_time_lists(stretches)):
            host, padding, serial = parts.of(batch)
            lists.append([combine(total, host, padding, serial) for total in totals])
        return lists

    def iteration_time_list(self, batches: Sequence[BatchLike]) -> list[float]:
        combine = self._combine
        times = []
        parts = _Parts(self)
        for batch, total in zip(batches, self.base.iteration_time_list(batches)):
            host, padding, serial = parts.of(batch)
            times.append(combine(total, host, padding, serial))
        return times


class _Parts:
    """An engine model's host work, padding and serial host work of a batch, the same as the last batch's while its
    tokens, sequences, logit rows and prompt tokens are: while its prompts' lengths, its number of decodes and its
    logit rows are, which they follow from."""

    def __init__(self, model: EngineCostModel):
        self.model = model
        self.prefill_lens: Sequence[int] | None = None
        self.num_decodes = -1
        self.logit_rows = -1
        self.parts = (0.0, 0.0, 0.0)

    def of(self, batch: BatchLike) -> tuple[float, float, float]:
        prefill_lens, num_decodes, rows = batch.prefill_lens, len(batch.decode_context_lens), batch.num_logit_rows
        if num_decodes != self.num_decodes or rows != self.logit_rows or prefill_lens != self.prefill_lens:
            model = self.model
            self.prefill_lens, self.num_decodes, self.logit_rows = prefill_lens, num_decodes, rows
            self.parts = model.parts(batch)
        return self.parts
