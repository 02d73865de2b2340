"""What an iteration costs: the interface the simulator's clock reads."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from calibrate.clock.breakdown import IterationTime, whole_forward
from calibrate.clock.roofline_terms import stretch_block_list as block_list
from engine.core.batch import Batch, BatchShape

BatchLike = Batch | BatchShape  # a live batch, or its shape kept after it ran
LIST_STEPS = 64  # a decode stretch this short has its block sums counted in a Python list; a longer one in numpy
SCALAR_STEPS = 512  # a roofline prices a decode stretch this short on Python floats, a step at a time (compiled,
# 0.03-0.3 us a step); a longer one on numpy arrays, whose dozen calls (15-70 us a stretch) cost as much about here


class CostModel(ABC):
    """Seconds for one iteration of a Batch (or its BatchShape), and for moving KV blocks over PCIe."""

    #: shown in every output so a reader knows where the times came from
    source: str = ""
    #: the same in a few words a person reads in a table (the device clock and the engine; the registry writes it,
    #: calibrate/cost_models/label.py); "" where a cost model was built by hand
    label: str = ""
    _charge_host: bool = False
    #: the host work by the named terms of the engine's host model (calibrate/parts/host_model.py), as a function of a
    #: batch's sequences and prompt tokens; None: by the three HOST_TERMS parts the clock adds
    named_host_terms: Callable[[int, int], dict[str, float]] | None = None
    #: whether a step's time is a function of its batch alone, so that the simulator may price the
    #: iterations of a decode stretch before it runs them (sim/core/fast_forward.py); False for a cost model
    #: that hands out times in call order (fidelity's replayed engine times)
    prices_ahead: bool = True

    @property
    def charge_host(self) -> bool:
        """Whether iteration_time includes the engine's host work around the forward; only a model that has host
        terms can, and a validation whose real clock is the forward alone turns it off."""
        return self._charge_host

    @charge_host.setter
    def charge_host(self, value: bool) -> None:
        self._charge_host = value

    @abstractmethod
    def iteration_time(self, batch: BatchLike) -> float: ...

    @abstractmethod
    def swap_time(self, num_blocks: int) -> float: ...

    # --- the two parts of iteration_time (docs/cost-model-split.md): a model that prices them apart overrides
    # both; by default all of an iteration is the device's
    def device_time(self, batch: BatchLike) -> float:
        """The device part of iteration_time: the forward's kernels."""
        return self.iteration_time(batch) - self.host_time(batch)

    def host_time(self, batch: BatchLike) -> float:
        """The host part of iteration_time: the engine's work around and inside the forward on the host."""
        return 0.0

    def breakdown(self, batch: BatchLike) -> IterationTime:
        """iteration_time by kernel kind and host term (calibrate/clock/breakdown.py). This default knows only the two
        parts: all of the device's is "forward"; a model that prices kinds apart overrides it."""
        swaps = batch.num_swap_blocks
        return whole_forward(self.device_time(batch), self.host_time(batch), self.swap_time(swaps) if swaps else 0.0)

    def name_host_terms(self, terms: Callable[[int, int], dict[str, float]]) -> None:
        """Break the host part down by a host model's named terms (the registry's, where the config names one)."""
        self.named_host_terms = terms

    def host_parts_of(self, batch: BatchLike, by_three: dict[str, float]) -> dict[str, float]:
        """The host part by term: the named host model's where there is one (they add up to host_time within
        rounding), else `by_three`, the clock's own three parts (which add up to it to the bit)."""
        if self.named_host_terms is None:
            return by_three
        return self.named_host_terms(batch.num_seqs, batch.num_prefill_tokens)

    def step_time(self, batch: BatchLike) -> float:
        """The whole iteration as the simulator charges it: swaps, then the forward."""
        swaps = batch.num_swap_blocks
        return self.iteration_time(batch) + (self.swap_time(swaps) if swaps else 0.0)

    # --- a decode stretch: the batch, then the same batch with every decode context one longer per step
    def decode_iteration_times(self, batch: BatchLike, num_steps: int) -> np.ndarray:
        """iteration_time of `batch` and of the num_steps - 1 iterations after it that repeat it with every
        decode context one longer per step, as the same floats as one call each. This default makes the
        calls; a model whose time is a closed form of the contexts overrides it with a vectorized one."""
        return np.array([self.iteration_time(shape) for shape in decode_shapes(batch, num_steps)], dtype=float)

    def decode_step_times(self, batch: BatchLike, num_steps: int) -> np.ndarray:
        """step_time of the same num_steps iterations, as the same floats as one call each."""
        if type(self).step_time is CostModel.step_time:  # the iteration plus its swaps, as step_time adds them
            swaps = batch.num_swap_blocks
            times = self.decode_iteration_times(batch, num_steps)
            # step_time adds 0.0 without swaps, which changes no float (a -0.0 loses its sign, which no clock sees)
            return times + self.swap_time(swaps) if swaps else times
        return np.array([self.step_time(shape) for shape in decode_shapes(batch, num_steps)], dtype=float)

    def decode_step_time_list(self, batch: BatchLike, num_steps: int) -> list[float]:
        """decode_step_times as Python floats (a fast-forwarded stretch adds them up one at a time)."""
        return self.decode_step_times(batch, num_steps).tolist()

    def decode_step_time_lists(self, stretches: Sequence[tuple[BatchLike, int]]) -> list[list[float]]:
        """decode_step_time_list of each (batch, num_steps), in order, as the same floats: a speculating stretch's
        proposer forwards, k an iteration (calibrate/clock/speculative_pricing.py). This default makes the calls;
        a model that prices stretches alike but for their contexts with the same terms once overrides it."""
        return [self.decode_step_time_list(batch, num_steps) for batch, num_steps in stretches]

    # --- several iterations, each its own batch: a speculating stretch's (sim/core/fast_forward.py)
    def step_time_list(self, batches: Sequence[BatchLike]) -> list[float]:
        """step_time of each batch, in order, as the same floats as one call each. This default makes the calls; a
        model that prices what such batches share once overrides it."""
        return [self.step_time(batch) for batch in batches]

    def iteration_time_list(self, batches: Sequence[BatchLike]) -> list[float]:
        """iteration_time of each batch, in order, as the same floats as one call each."""
        return [self.iteration_time(batch) for batch in batches]


def per_step(times, num_steps: int) -> np.ndarray:
    """A vectorized time as one float per step: a batch with no decodes takes the same time at each."""
    times = np.asarray(times, dtype=float)
    return times if times.ndim else np.full(num_steps, float(times))


def stretch_context_sums(batch: BatchLike, num_steps: int) -> np.ndarray:
    """sum_decode_context of `batch` and of the num_steps - 1 iterations after it (decode_shapes)."""
    first, step = batch.sum_decode_context, batch.num_decodes
    if not step:
        return np.full(num_steps, first, dtype=np.int64)
    return np.arange(first, first + num_steps * step, step, dtype=np.int64)


def stretch_block_sums(batch: BatchLike, num_steps: int, block_size: int) -> np.ndarray:
    """decode_blocks(block_size) of `batch` and of the num_steps - 1 iterations after it: each decode's
    ceil(context / block_size), its context one longer each step."""
    # A context c spans one block more at step s exactly when c + s - 1 is a multiple of block_size: first at
    # step (-c) % block_size + 1, then every block_size steps. So step s (>= 1) adds as many blocks as there are
    # contexts with (-c) % block_size == (s - 1) % block_size, and the sums are the first step's plus the running
    # total of those. Integers all, so the same as summing every step's ceilings (reference_block_sums), at a
    # cost of one pass over the contexts and one over the steps instead of numpy on a steps x decodes array.
    if num_steps <= LIST_STEPS:
        return np.fromiter(stretch_block_list(batch, num_steps, block_size), dtype=np.int64, count=num_steps)
    first = batch.decode_blocks(block_size)
    added_at = np.asarray(block_crossings(batch, block_size), dtype=np.int64)[
        np.arange(num_steps - 1, dtype=np.int64) % block_size]
    return np.concatenate(([first], first + np.cumsum(added_at))).astype(np.int64, copy=False)


def block_crossings(batch: BatchLike, block_size: int) -> list[int]:
    """The decodes by the residue r = (-context) % block_size: each spans one more block at the steps s >= 1
    with (s - 1) % block_size == r."""
    crossing = [0] * block_size
    for c in batch.decode_context_lens:
        crossing[-c % block_size] += 1
    return crossing


def stretch_block_list(batch: BatchLike, num_steps: int, block_size: int) -> list[int]:
    """stretch_block_sums as a list of Python ints (a short stretch priced on Python floats), counted by
    compiled code where the control plane is compiled (roofline_terms.stretch_block_list)."""
    return block_list(batch.decode_context_lens, num_steps, block_size)


def reference_block_sums(batch: BatchLike, num_steps: int, block_size: int) -> np.ndarray:
    """stretch_block_sums as every step's sum of ceilings over a steps x decodes array (what the test checks it on)."""
    contexts = np.asarray(batch.decode_context_lens, dtype=np.int64)
    steps = np.arange(num_steps, dtype=np.int64)[:, None]
    return ((contexts[None, :] + steps + (block_size - 1)) // block_size).sum(axis=1)


def decode_shapes(batch: BatchLike, num_steps: int) -> Iterator[BatchShape]:
    """`batch` and the num_steps - 1 iterations after it, each with every decode context one longer."""
    prefills, cached = tuple(batch.prefill_lens), tuple(batch.prefill_cached_lens)
    if not any(cached):
        cached = ()
    contexts = tuple(batch.decode_context_lens)
    for step in range(num_steps):
        yield BatchShape(prefills, tuple(c + step for c in contexts), batch.num_swap_blocks, batch.num_copy_blocks,
                         batch.num_running_groups, cached)


class PricedOnBase(CostModel):
    """A cost model that prices its iterations on another one (`base`): whether host work is charged is the base's
    (a validation that turns it off turns it off where the host terms are)."""

    base: CostModel

    @property
    def charge_host(self) -> bool:
        return self.base.charge_host

    @charge_host.setter
    def charge_host(self, value: bool) -> None:
        self.base.charge_host = value


class ScaledCostModel(CostModel):
    """Another cost model's times, all multiplied by one factor: the same machine running slower
    (factor > 1) or faster than when it was calibrated (see calibrate/profiling/speed.py)."""

    def __init__(self, base: CostModel, factor: float):
        if not factor > 0:
            raise ValueError(f"a speed factor must be positive, got {factor}")
        self.base, self.factor = base, factor
        self.prices_ahead = base.prices_ahead
        self.source = f"{base.source} x {factor:.3f} (machine speed probed during the replay)"
        self.label = f"{base.label} x {factor:.3f} speed" if base.label else ""

    def iteration_time(self, batch: BatchLike) -> float:
        return self.base.iteration_time(batch) * self.factor

    def decode_iteration_times(self, batch: BatchLike, num_steps: int) -> np.ndarray:
        return self.base.decode_iteration_times(batch, num_steps) * self.factor

    def device_time(self, batch: BatchLike) -> float:
        return self.base.device_time(batch) * self.factor

    def host_time(self, batch: BatchLike) -> float:
        return self.base.host_time(batch) * self.factor

    def swap_time(self, num_blocks: int) -> float:
        return self.base.swap_time(num_blocks) * self.factor

    def breakdown(self, batch: BatchLike) -> IterationTime:
        """The base's breakdown, every part times the factor (which rounds each apart: the parts add up to
        device_s within rounding, not to the bit)."""
        base, f = self.base.breakdown(batch), self.factor
        return IterationTime({k: v * f for k, v in base.device.items()}, {k: v * f for k, v in base.host.items()},
                             base.device_s * f, base.host_s * f, base.swap_s * f, parts_exact=False)
