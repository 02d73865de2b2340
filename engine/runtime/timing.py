"""An iteration's time, measured three ways: the timed step, its device span, and its wall time.

- `seconds` (a profile's time_s, a replay's forward clock): the step from its block plans to its sampled
  tokens, CUDA events from an idle stream on a GPU (host work done inside it, tensor uploads and kernel
  launches, counts, as it does in a serving loop), perf_counter on a CPU.
- `device_s`: the span of the step's device work, CUDA events around it: from the first block plan to
  the last sampling kernel, before the token ids are read back. On a CPU, the same span's wall time.
  In an eager engine that the host cannot keep fed, the span includes the gaps the device waits for
  the next launch: a host-bound engine shows it as device time close to its wall time.
- `wall_s`: the whole call on the host clock, its checks, input building and token read-back included.
  `host_s` is the rest: wall_s - device_s.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class IterationTiming:
    seconds: float  # the timed step (time_s)
    device_s: float  # the span of its device work
    wall_s: float  # the whole iteration on the host clock

    @property
    def host_s(self) -> float:
        return max(self.wall_s - self.device_s, 0.0)


class IterationTimer:
    """`with timer:` around the work; `timer.seconds` afterwards.

    The CUDA start event is recorded on an idle stream, so host work done inside the block
    (tensor copies, kernel launches) counts, as it does in a serving loop.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.seconds = 0.0

    def __enter__(self) -> IterationTimer:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # nothing earlier may leak into this iteration
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record(torch.cuda.current_stream(self.device))
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            self._end.record(torch.cuda.current_stream(self.device))
            self._end.synchronize()
            self.seconds = self._start.elapsed_time(self._end) / 1e3
        else:
            self.seconds = time.perf_counter() - self._t0


class DeviceSpan:
    """`start()` before an iteration's first kernel, `stop()` after its last; `seconds` once the stream
    has reached the stop (read it after the iteration's one sync: reading it never syncs by itself)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device
        self._t0 = self._t1 = 0.0

    def start(self) -> None:
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record(torch.cuda.current_stream(self.device))
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> None:
        if self.cuda:
            self._end = torch.cuda.Event(enable_timing=True)
            self._end.record(torch.cuda.current_stream(self.device))
        else:
            self._t1 = time.perf_counter()

    @property
    def seconds(self) -> float:
        if self.cuda:
            self._end.synchronize()  # a no-op after the iteration's read-back, which waited for the stream
            return self._start.elapsed_time(self._end) / 1e3
        return self._t1 - self._t0
