"""A decode replica's side of disaggregated serving (docs/disaggregated.md): requests prefilled elsewhere.

Each is received with its blocks reserved while its KV is copied in (`copying`, by id), waits once the copy is
done (`arrived`, in the order the copies finished), and decodes from the next schedule() that has room for it.
Until then its token slots count as reserved in the pool's breakdown: vLLM's decode replica holds them for the
request before it runs.
"""
from __future__ import annotations

from collections import deque

from engine.core.kv_usage import KVUsage
from engine.core.sequence import SequenceGroup


class IncomingRequests:
    """The requests a decode replica received and has not run yet, and the token slots they hold."""

    __slots__ = ("copying", "arrived", "slots")

    def __init__(self) -> None:
        self.copying: dict[int, SequenceGroup] = {}
        self.arrived: deque[SequenceGroup] = deque()
        self.slots = 0

    def pending(self) -> bool:
        """Whether any received request has not run yet."""
        return bool(self.copying or self.arrived)

    def groups(self) -> list[SequenceGroup]:
        return [*self.copying.values(), *self.arrived]

    def received(self, group: SequenceGroup, slots: int) -> None:
        """Its blocks are reserved and hold `slots` of its tokens once the copy is done."""
        self.copying[group.request_id] = group
        self.slots += slots

    def copied(self, request_id: int) -> None:
        self.arrived.append(self.copying.pop(request_id))

    def next_to_run(self) -> SequenceGroup | None:
        return self.arrived[0] if self.arrived else None

    def run(self, slots: int) -> SequenceGroup:
        """The oldest arrived request runs from this step on: its slots are the running requests' now."""
        self.slots -= slots
        return self.arrived.popleft()

    def counted(self, usage: KVUsage) -> KVUsage:
        """The breakdown with the incoming requests' slots reserved (read off the pool, they look internal)."""
        if self.slots:
            reserved = min(self.slots, usage.internal)
            usage.reserved, usage.internal = reserved, usage.internal - reserved
        return usage
