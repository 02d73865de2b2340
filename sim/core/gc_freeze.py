"""The objects older than a simulation kept out of the cyclic garbage collector's passes while it runs."""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def older_objects_frozen():
    """Keep the objects that exist before the simulation (modules, the trace, the config) out of the cyclic
    garbage collector's passes while it runs: a full pass over them cost ~30 ms a time on an hour's run,
    and the simulation frees its own objects by reference count. Left alone where something else froze."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
