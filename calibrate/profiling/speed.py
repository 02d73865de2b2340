"""How fast the machine is right now: a fixed pair of iterations, timed now and then.

A shared machine does not run at one speed: on the project's 2-core VM the same decode takes
anywhere from 45 to 78 ms within minutes (benchmarks/fidelity/cpu_drift.py). A cost model fitted at
one moment then mispredicts a replay measured at another by however much the machine sped up
or slowed down, whatever its terms. The probe separates the two: the profiler times it all
through the grid (its median is the profile's `speed_reference`), the validator times it all
through each real replay, and their ratio is that replay's machine-speed factor.

The probe shapes are fixed, small, and one of each kind of work (a memory-bound decode, a
compute-bound prefill), so the factor does not depend on the workload being measured.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.core.blocks import blocks_for

# name -> (prefill_lens, decode_context_lens)
PROBE_SHAPES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "decode": ((), (64,)),
    "prefill": ((64,), ()),
}
PROBE_DESCRIPTION = "a decode of 1 sequence at context 64, and a 64-token prefill"


def probe_blocks(block_size: int) -> int:
    """KV blocks a runner needs to time any probe shape (each sequence's tokens and one more)."""
    return max(sum(blocks_for(n + 1, block_size) for n in (*prefill, *decode))
               for prefill, decode in PROBE_SHAPES.values())


@dataclass
class SpeedSamples:
    """Probe times, seconds, by probe shape name, in the order they were taken."""
    times: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in PROBE_SHAPES})

    def add(self, name: str, seconds: float) -> None:
        self.times[name].append(seconds)

    @property
    def count(self) -> int:
        return min((len(v) for v in self.times.values()), default=0)

    def medians(self) -> dict[str, float]:
        return {name: statistics.median(v) for name, v in self.times.items() if v}

    def reference(self) -> dict:
        """What a profile stores: each probe's median time while the grid was measured."""
        return {**{f"{name}_s": t for name, t in self.medians().items()}, "samples": self.count,
                "probe": PROBE_DESCRIPTION}


@dataclass(frozen=True)
class MachineSpeed:
    """How much slower than at calibration the machine ran (>1 slower, <1 faster): `decode` from the
    memory-bound decode probe, `prefill` from the compute-bound prefill probe, and `factor`, their
    geometric mean, which scales every iteration. Scaling decode-only iterations by the decode probe
    and the rest by the prefill probe was tried on 40 replays of 30-s traces and was no better: the
    decode probe over-stated decodes' slowdown by ~2%, the prefill probe under-stated that of mixed
    iterations by ~5%."""
    decode: float
    prefill: float

    @property
    def factor(self) -> float:
        return math.sqrt(self.decode * self.prefill)


def machine_speed(medians: dict[str, float], reference: dict) -> MachineSpeed | None:
    """Median probe time now / median probe time then, per probe shape; None when either lacks a probe."""
    ratios = {name: medians[name] / reference[f"{name}_s"] for name in PROBE_SHAPES
              if name in medians and reference.get(f"{name}_s")}
    if len(ratios) != len(PROBE_SHAPES) or not all(r > 0 for r in ratios.values()):
        return None
    return MachineSpeed(ratios["decode"], ratios["prefill"])


class SpeedProbe:
    """Times the probe shapes on `runner` (its own small pool; weights may be shared with an engine).

    `maybe_sample` takes a sample when `every_s` of wall time has passed since the last, so a
    caller can invoke it after every iteration of something else.
    """

    def __init__(self, runner, every_s: float = 1.0, clock: Callable[[], float] = time.perf_counter):
        if not every_s > 0:
            raise ValueError(f"the probe interval every_s must be a positive number of seconds, got {every_s}")
        self.runner, self.every_s, self.clock = runner, every_s, clock
        self.samples = SpeedSamples()
        self._last = -math.inf
        for prefill, decode in PROBE_SHAPES.values():  # first runs pay one-off allocation costs
            runner.time_batch(list(prefill), list(decode), repeats=1, warmup=1)

    def sample(self) -> None:
        for name, (prefill, decode) in PROBE_SHAPES.items():
            self.samples.add(name, self.runner.time_batch(list(prefill), list(decode), repeats=1, warmup=0)[0])
        self._last = self.clock()

    def maybe_sample(self) -> None:
        if self.clock() - self._last >= self.every_s:
            self.sample()

    def reset(self) -> SpeedSamples:
        """Start a new window; returns the samples of the one that ends."""
        done, self.samples, self._last = self.samples, SpeedSamples(), -math.inf
        return done
