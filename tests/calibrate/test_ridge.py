"""The roofline that bends at the ridge: the memory roof far below it, the compute roof far above, 1/r at it."""
import math

import numpy as np
import pytest

from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from calibrate.hardware.hardware import load_hardware
from calibrate.maths.ridge import bent_roof, bent_roofs, ridge_exponent
from engine.core.batch import Batch
from engine.errors import SpecError
from engine.specs.loader import load_model_spec
from sim.experiment.config import load_experiment
from sim.experiment.run import make_cost_model


def test_the_exponent_from_the_ridge_efficiency():
    assert ridge_exponent(1.0) == math.inf
    assert ridge_exponent(0.5) == pytest.approx(1.0)  # c + m
    assert ridge_exponent(2 ** -0.5) == pytest.approx(2.0)  # Euclidean
    for bad in (0.0, -0.1, 1.01):
        with pytest.raises(ValueError, match="share in"):
            ridge_exponent(bad)


@pytest.mark.parametrize("ridge", [0.5, 0.63, 0.8, 0.95])
def test_limits_and_the_ridge(ridge):
    p = ridge_exponent(ridge)
    # far below the ridge (compute a thousandth of memory) it is the memory roof, far above the compute roof
    assert bent_roof(1e-6, 1e-3, p) == pytest.approx(1e-3, rel=2e-3)
    assert bent_roof(1e-3, 1e-9, p) == pytest.approx(1e-3, rel=1e-5)
    assert bent_roof(1e-3, 1e-9, p) >= 1e-3
    # at the ridge, the roof / r; never below the hard max, never above the sum
    assert bent_roof(2e-3, 2e-3, p) == pytest.approx(2e-3 / ridge)
    for c, m in ((1.0, 0.3), (0.3, 1.0), (1.0, 1.0)):
        assert max(c, m) <= bent_roof(c, m, p) <= c + m + 1e-12
    assert bent_roof(0.0, 5.0, p) == 5.0


def test_the_hard_max_and_large_exponents_neither_overflow_nor_differ():
    assert bent_roof(3.0, 2.0, math.inf) == 3.0
    assert bent_roof(1e-4, 2e-4, ridge_exponent(0.9999)) == pytest.approx(2e-4, rel=1e-9)
    c, m = np.array([1e-5, 1e-3, 2e-3, 0.0]), np.array([1e-3, 1e-5, 2e-3, 4e-3])
    p = ridge_exponent(0.7)
    assert bent_roofs(c, m, p) == pytest.approx([bent_roof(a, b, p) for a, b in zip(c, m)])
    assert list(bent_roofs(c, m, math.inf)) == list(np.maximum(c, m))


def decode(batch):
    return Batch(decode_seq_ids=list(range(batch)), decode_context_lens=[1] * batch, num_running_groups=batch)


def prefill(tokens):
    return Batch(prefill_seq_ids=[0], prefill_lens=[tokens], prefill_sample_ids=[(0,)], num_running_groups=1)


def test_the_roofline_bends_only_near_its_ridge():
    model, hw = load_model_spec("opt-13b"), load_hardware("a100-40gb")
    hard = RooflineCostModel(model, hw)
    bent = RooflineCostModel(model, hw, params=RooflineParams(ridge_efficiency=0.7))
    assert "ridge_eff=0.7" in bent.source and "ridge_eff" not in hard.source
    # a batch of one reads the weights; a 2,048-token prefill computes: the bend is out of sight at both
    assert bent.iteration_time(decode(1)) == pytest.approx(hard.iteration_time(decode(1)), rel=1e-3)
    long = Batch(decode_seq_ids=list(range(8192)), decode_context_lens=[1] * 8192)
    assert bent.iteration_time(long) == pytest.approx(hard.iteration_time(long), rel=0.01)
    # at the ridge (compute = weight read) the linear part takes 1 / 0.7 as long
    ridge_tokens = hard._s_weights / (hard._s_per_token_linear + hard._s_per_logit_row)  # a decode: logits too
    near = decode(round(ridge_tokens))
    attention = near.sum_decode_context * hard._s_per_context_token
    linear_hard = hard.iteration_time(near) - attention
    assert bent.iteration_time(near) - attention == pytest.approx(linear_hard / 0.7, rel=0.01)
    # and the bend never makes anything faster
    for batch in (decode(1), decode(64), decode(256), prefill(128), prefill(512), prefill(2048)):
        assert bent.iteration_time(batch) >= hard.iteration_time(batch)


def test_a_config_sets_the_ridge_efficiency_as_a_share(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text("model: opt-13b\nhardware: a100-40gb\nkv_cache_gib: 12\nworkload: {dataset: sharegpt}\n"
                      "systems: [vllm]\nrates: [1.0]\ncost_model: {kind: roofline, ridge_efficiency: 0.63}\n")
    exp = load_experiment(config)
    cost = make_cost_model(exp, exp.systems[0])
    assert cost.params.ridge_efficiency == 0.63 and "ridge_eff=0.63" in cost.source
    for bad in ("0", "1.5"):
        with pytest.raises(SpecError, match="cost_model.ridge_efficiency"):
            load_experiment(config, [f"cost_model.ridge_efficiency={bad}"])
