"""The real engine does not speculate yet: given a speculating system it stops with one line naming the key,
instead of running it as if nothing were proposed."""
from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("torch")

from engine.core.speculative import SpeculativeSpec  # noqa: E402
from engine.core.system import SystemSpec  # noqa: E402
from engine.errors import SpecError  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402


def test_a_speculating_system_is_refused_by_the_engine(opt_tiny):
    system = dataclasses.replace(SystemSpec("vLLM", "vllm", block_size=8),
                                 speculative=SpeculativeSpec("ngram", 2, (0.5, 0.5)))
    with pytest.raises(SpecError, match="system.speculative: the real engine does not speculate yet"):
        Engine(opt_tiny, system, num_gpu_blocks=64, run_model=False, time_fn=lambda batch: 0.01)
