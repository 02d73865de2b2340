"""Requests the control plane can never serve, found while serving."""
from __future__ import annotations


class Unservable(ValueError):
    """A request this deployment can never serve (too long for the model, too big for the pool)."""


class Unschedulable(Unservable):
    """Requests wait that the scheduler can never run: found by a data plane once arrivals end."""


class SwapSpaceExhausted(Unservable):
    """A multi-sequence group must be preempted by swapping (its samples share blocks), and the CPU swap
    space cannot hold it: the deployment's swap space is too small for its workload (swap_space_gib)."""
