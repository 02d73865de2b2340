"""Requests the control plane can never serve, found while serving.

Not compiled by mypyc (setup.py): an exception class compiled with it has no __dict__, and these cross
processes pickled (a sweep's worker raises them in the parent) and are compared by their attributes.
"""
from __future__ import annotations


class Unservable(ValueError):
    """A request this deployment can never serve (too long for the model, too big for the pool)."""


class Unschedulable(Unservable):
    """Requests wait that the scheduler can never run: found by a data plane once arrivals end."""


class SwapSpaceExhausted(Unservable):
    """A multi-sequence group must be preempted by swapping (its samples share blocks), and the CPU swap
    space cannot hold it: the deployment's swap space is too small for its workload (swap_space_gib)."""


class RequestTooLong(Unservable):
    """Prompt plus output exceed the model's maximum sequence length."""


class RequestTooLarge(Unservable):
    """The request's KV can never fit this pool, even alone: it would block the queue forever."""
