"""The simulator does not run a speculating system yet: it says so instead of running it as if nothing were
proposed or priced."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from engine.core.speculative import SpeculativeSpec
from engine.core.system import PAPER_SYSTEMS
from sim.core.simulate import simulate
from tests.helpers.simulation import MODEL, ROOFLINE, random_trace


def test_a_speculating_system_is_refused_until_the_simulator_runs_it():
    system = replace(PAPER_SYSTEMS["vllm"], speculative=SpeculativeSpec("ngram", 2, (0.5, 0.5)))
    with pytest.raises(ValueError, match="speculates: the simulator does not"):
        simulate(random_trace(0, count=5), MODEL, system, ROOFLINE, 200, 64, rng=np.random.default_rng(0))
