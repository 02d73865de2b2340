"""The errors a user sees, in one module every room imports (engine is the bottom room).

SpecError: a bad value in a file or argument a user wrote, naming the file, the key and what is valid.
Unservable and its kinds: requests a deployment can never serve, found while serving. one_line: any error's
message on one line, as the commands print it.

Not compiled by mypyc (outside engine/core): an exception class compiled with it has no __dict__, and these
cross processes pickled (a sweep's worker raises them in the parent) and are compared by their attributes.
"""
from __future__ import annotations


class SpecError(ValueError):
    """A bad value in a file a user wrote: names the file, the key path and what is valid."""

    def __init__(self, source: str, key: str, message: str):
        self.source = str(source)
        self.key = key
        self.message = message
        where = f"{self.source}: {key}" if key else self.source
        super().__init__(f"{where}: {message}")

    def __reduce__(self):
        # An error raised in a worker process (or a Dask worker) travels back pickled; the default
        # rebuilds it from the one formatted message and fails on this three-argument __init__.
        return self.__class__, (self.source, self.key, self.message), self.__dict__


def one_line(err: BaseException) -> str:
    """An error's message on one line: a YAML parser's, for one, spans several."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return "; ".join(lines) or type(err).__name__


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
