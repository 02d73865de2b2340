"""isinstance and issubclass among the schedulers are exact, whatever was asked before, on either build.

Compiled by mypyc, subclasses of an abc.ABC share ABC's own isinstance cache, so the first positive answer for
a class was returned for every later question about it (`isinstance(vllm, ReservationScheduler)` became True
once `isinstance(vllm, VLLMScheduler)` had been asked). The scheduler base is a plain class since; this asks
every question in both orders and after the caches have been warmed, and checks no compiled class is an ABC.
"""
from __future__ import annotations

import abc
import itertools

import pytest

from engine.core.compiled import is_compiled
from engine.core.scheduler.base import Scheduler
from engine.core.scheduler.common import QueueScheduler
from engine.core.scheduler.fastertransformer import FasterTransformerScheduler
from engine.core.scheduler.orca import OrcaScheduler
from engine.core.scheduler.reservation_scheduler import ReservationScheduler
from engine.core.scheduler.vllm import VLLMScheduler

CLASSES = [Scheduler, QueueScheduler, ReservationScheduler, OrcaScheduler, FasterTransformerScheduler, VLLMScheduler]


def truth(sub: type, base: type) -> bool:
    return base in sub.__mro__


@pytest.mark.parametrize("reverse", [False, True])
def test_issubclass_is_exact_in_any_order(reverse):
    pairs = list(itertools.product(CLASSES, CLASSES))
    for sub, base in reversed(pairs) if reverse else pairs:
        assert issubclass(sub, base) is truth(sub, base), (sub.__name__, base.__name__)
    for sub, base in pairs:  # again, every cache warm
        assert issubclass(sub, base) is truth(sub, base), (sub.__name__, base.__name__)


def test_no_scheduler_class_is_an_abc():
    for cls in CLASSES:
        assert not isinstance(cls, abc.ABCMeta), f"{cls.__name__} is an ABC: its isinstance cache may be shared"


@pytest.mark.skipif(is_compiled(), reason="compiled, a class with abstract methods has no instances: mypyc checks "
                    "self against the concrete schedulers alone")
def test_the_base_refuses_to_schedule():
    with pytest.raises(NotImplementedError, match="Scheduler.schedule"):
        Scheduler().schedule()
