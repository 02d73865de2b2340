"""vLLM v0.3's delay_factor (prefill_policy separate): new prompts wait a share of the last prompt run's latency.

The latency is measured from the schedule() that ran a prompt-only iteration to the next schedule(), as v0.3's
_passed_delay does; the scheduler tells the delay when a prompt ran and asks it before each waiting prompt.
"""
from __future__ import annotations

from collections.abc import Sequence

from engine.core.sequence import SequenceGroup


class PromptDelay:
    """v0.3's _passed_delay and the clock it keeps (delay_factor 0: prompts never wait)."""

    __slots__ = ("factor", "last_latency", "prev_time_s", "prev_prompt")

    def __init__(self, factor: float) -> None:
        self.factor = factor
        self.last_latency = 0.0  # the last prompt run's, from its schedule() to the next one
        self.prev_time_s = 0.0
        self.prev_prompt = False  # whether the previous schedule() ran prompts (or ignored some)

    def step_began(self, now_s: float) -> None:
        """v0.3's _passed_delay, first part, at each schedule() that may run prompts: the last prompt run's
        latency, from its schedule() to this one."""
        if self.prev_prompt:
            self.last_latency = now_s - self.prev_time_s
        self.prev_time_s, self.prev_prompt = now_s, False

    def prompt_ran(self) -> None:
        self.prev_prompt = True

    def passed(self, now_s: float, waiting: Sequence[SequenceGroup], anyone_running: bool) -> bool:
        """v0.3's _passed_delay, asked before each waiting prompt as there: new prompts wait until the oldest of
        them has waited factor x the last prompt run's latency, or nothing runs."""
        if not self.factor or not waiting:
            return True
        earliest = min(group.arrival_s for group in waiting)
        return now_s - earliest > self.factor * self.last_latency or not anyone_running
