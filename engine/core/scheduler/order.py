"""The order vLLM's scheduler serves its running and swapped-out requests in (vLLM v0.4's scheduling Policy).

The running groups are kept in it, so that preemption takes the last (the least urgent) first; the swapped-out
groups come back in it; a group preempted by recomputation goes back among the waiting in it. New requests
queue in the order they come, as in vLLM, and are admitted from the front. First come, first served is the
paper's order and vLLM's default: by arrival time, then request id. Another order is a subclass with its own
key (tests/engine/core/test_vllm_scheduler.py has one), handed to VLLMScheduler.
"""
from __future__ import annotations

from collections import deque

from mypy_extensions import mypyc_attr

from engine.core.sequence import SequenceGroup

__all__ = ["FirstComeFirstServed", "Order", "insert_in_order"]


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled, it stays a base a test's order can extend
class Order:
    """Serves the group with the smaller key first."""

    def key(self, group: SequenceGroup) -> tuple[float, int]:
        raise NotImplementedError(f"{type(self).__name__}.key")


class FirstComeFirstServed(Order):
    def key(self, group: SequenceGroup) -> tuple[float, int]:
        return (group.arrival_s, group.request_id)


def insert_in_order(queue: deque[SequenceGroup], group: SequenceGroup, order: Order) -> None:
    """Put a preempted group back in the queue in order. It comes before nearly everything queued (admission
    takes the front), so the scan from the front is short."""
    key = order.key(group)
    index = next((i for i, g in enumerate(queue) if order.key(g) > key), len(queue))
    queue.insert(index, group)
