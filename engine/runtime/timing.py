"""Wall time of one iteration on the device: CUDA events on a GPU, perf_counter on a CPU."""
from __future__ import annotations

import time

import torch


class IterationTimer:
    """`with timer:` around the work; `timer.seconds` afterwards.

    The CUDA start event is recorded on an idle stream, so host work done inside the block
    (tensor transfers, kernel launches) counts, as it does in a serving loop.
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
