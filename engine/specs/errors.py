"""Errors a user can cause, with enough context to fix them."""
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
