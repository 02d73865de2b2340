"""vLLM >= v0.2's ignored_seq_groups: a request that can never run is ignored when it reaches the queue's head.

A policy that ignores instead of refusing on arrival notes why each such request cannot run as it arrives
(`why`, by request id); schedule() ignores it when it reaches the waiting queue's head (vLLM's
FINISHED_IGNORED), and the data plane takes the requests ignored since it last asked (take_ignored).
"""
from __future__ import annotations

from engine.core.sequence import SequenceGroup


class IgnoredRequests:
    """The unservable requests waiting to be ignored, and those ignored since the data plane last took them.
    `ignores`: whether the policy ignores them at all (else it refuses them on arrival)."""

    __slots__ = ("ignores", "why", "ignored")

    def __init__(self, ignores: bool) -> None:
        self.ignores = ignores
        self.why: dict[int, str] = {}
        self.ignored: list[SequenceGroup] = []

    def noted(self, request_id: int, why: str) -> None:
        self.why[request_id] = why

    def is_unservable(self, request_id: int) -> bool:
        return request_id in self.why

    def ignore(self, group: SequenceGroup) -> None:
        self.why.pop(group.request_id, None)
        self.ignored.append(group)

    def forget(self, request_id: int) -> None:
        """The request left the system otherwise (aborted)."""
        self.why.pop(request_id, None)

    def take(self) -> list[SequenceGroup]:
        ignored = self.ignored
        if ignored:
            self.ignored = []
        return ignored
