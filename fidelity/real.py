"""The real side of a validation: engines for the configured systems on one set of weights, a speed
probe beside them, and what one real replay leaves (its records, measured times and machine speed)."""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field

import pandas as pd

from calibrate.profiling.speed import MachineSpeed, machine_speed
from engine.core.system import SystemSpec
from fidelity.checks import Pool
from fidelity.config import ValidationConfig
from fidelity.replay import MeasuredClock
from sim.workload.trace import Trace


@dataclass
class RealReplay:
    """One real replay: its records as frames, every iteration's measured time and batch, and how fast
    the machine ran meanwhile (the speed probe's medians, and their ratio to the profile's reference)."""
    requests: pd.DataFrame
    iterations: pd.DataFrame
    times: list[float]
    shapes: list
    wall_s: float
    probe_s: dict = field(default_factory=dict)
    speed: MachineSpeed | None = None  # None: the machine was not probed (no speed reference)
    probe_samples: int = 0
    host_s: list = field(default_factory=list)  # per iteration: the step's wall time beyond the timed forward
    acceptance: list = field(default_factory=list)  # a speculating system's AcceptanceOutcome per speculating step

    @property
    def speed_factor(self) -> float:
        return math.nan if self.speed is None else self.speed.factor


@contextlib.contextmanager
def torch_threads(threads: int | None):
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


class RealSide:
    """Engines for the configured systems, sharing one set of weights, and a speed probe beside them.

    With a `speed_reference` (the profile's) the probe is timed before, all through (every
    validation.speed_probe_every_s of wall time, between iterations: the engine's clock never sees
    it) and after each replay; the replay's speed factor is its probes' medians over the reference.
    """

    def __init__(self, cfg: ValidationConfig, spec, seed: int, speed_reference: dict | None = None):
        self.cfg, self.spec, self.seed = cfg, spec, seed
        self.speed_reference = speed_reference or {}
        self._decoder = None
        self.probe = None

    def engine(self, system: SystemSpec, pool: Pool):
        from engine.runtime.engine import Engine

        opts = self.cfg.options
        # weights are random and seeded: the same for every system, so they are built once
        engine = Engine(self.spec, system, opts.device, opts.resolved_dtype, self.seed, pool.num_gpu_blocks,
                        pool.num_cpu_blocks, attention_backend=opts.attention_backend, model=self._decoder,
                        cuda_graphs=self.cfg.engine.cuda_graphs)
        self._decoder = engine.runner.model
        warm_up(engine.runner, pool)
        if self.speed_reference and self.probe is None:
            self.probe = self._speed_probe(pool.block_size)
        return engine

    def _speed_probe(self, block_size: int):
        from calibrate.profiling.speed import SpeedProbe, probe_blocks
        from engine.runtime.runner import ModelRunner

        opts = self.cfg.options
        runner = ModelRunner(self.spec, opts.device, opts.resolved_dtype, self.seed,
                             num_gpu_blocks=probe_blocks(block_size), num_cpu_blocks=0, block_size=block_size,
                             attention_backend=opts.attention_backend, model=self._decoder,
                             cuda_graphs=self.cfg.engine.cuda_graphs)
        return SpeedProbe(runner, every_s=opts.speed_probe_every_s)

    def clock_for(self, engine) -> MeasuredClock:
        return MeasuredClock(engine.runner, after_iteration=self.probe.maybe_sample if self.probe else None,
                             engine=engine, include_host=self.cfg.options.clock == "step")

    def replay(self, engine, clock: MeasuredClock, trace: Trace) -> RealReplay:
        clock.reset()
        if self.probe:
            self.probe.reset()
            self.probe.sample()
        started = time.perf_counter()
        result = engine.replay(trace, self.cfg.options.sampling, time_fn=clock)
        wall = time.perf_counter() - started
        probe_s, speed, samples = {}, None, 0
        if self.probe:
            self.probe.sample()
            window = self.probe.reset()
            probe_s, samples = window.medians(), window.count
            speed = machine_speed(probe_s, self.speed_reference)
        return RealReplay(pd.DataFrame(result.request_columns()), pd.DataFrame(result.iteration_columns()),
                          list(clock.times), list(clock.shapes), wall, probe_s, speed, samples,
                          list(result.host_s), list(clock.acceptance))


def warm_up(runner, pool: Pool) -> None:
    """One untimed prefill + decode before the first replay, as the profiler warms up before it times:
    a fresh process's first forward pays one-off allocation and dispatch costs no later iteration does."""
    if pool.num_gpu_blocks >= 2:
        runner.time_batch([pool.block_size], [pool.block_size], repeats=1, warmup=1)
