"""The exception that carries a bad step time out of a SimPy process.

Kept out of the modules setup.py compiles: mypyc's exception classes do not come through SimPy's re-raise
(`type(e)(*e.args)`) as themselves, so `run_to_end` would miss it and a sweep's worker would report an
internal error instead of the SpecError (tests/sim/experiment/test_reruns.py).
"""
from __future__ import annotations

__all__ = ["ClockFault"]


class ClockFault(Exception):
    """Carries a SpecError out of the SimPy process to `run_to_end`, which raises the SpecError itself.

    SimPy re-raises a failed process's exception as `type(e)(*e.args)`; a SpecError, built from a
    file, a key and a message, does not survive that, a one-argument wrapper does.
    """
