"""A run's fingerprint reads what a simulated time depends on, and only that: the model spec's priced values (the
engine's rotary settings move no simulated number, so editing them keeps a resumed sweep's runs, while a layer
more invalidates them), and every shipped file the lengths come from, a stand-in drawn from real pairs included."""
import dataclasses

from sim.experiment.config import load_experiment
from sim.experiment.fingerprint import config_digest, data_files, spec_values
from sim.workload.paths import SHAREGPT_CSV
from tests.helpers.configs import tiny


def digest_with_model(exp, **changes):
    changed = dataclasses.replace(exp, model=dataclasses.replace(exp.model, **changes))
    return config_digest(changed, changed.systems[0], 1.0, 0, {"specs": spec_values(changed)})


def test_rotary_settings_leave_the_digest_and_a_priced_field_moves_it(write_config):
    exp = load_experiment(write_config(tiny()))
    plain = digest_with_model(exp)
    assert digest_with_model(exp, rope_theta=500000.0) == plain
    assert digest_with_model(exp, partial_rotary_factor=0.5) == plain
    assert digest_with_model(exp, num_layers=exp.model.num_layers + 1) != plain
    assert digest_with_model(exp, num_kv_heads=1) != plain
    assert "rope_theta" not in spec_values(exp)["model"] and "num_layers" in spec_values(exp)["model"]


def test_the_fig11_standin_is_fingerprinted_by_the_real_pairs_it_scales(write_config):
    standin = load_experiment(write_config(tiny(workload="{dataset: sharegpt-fig11-standin, duration_s: 30}",
                                                cost_model="roofline")))
    assert data_files(standin) == {"workload.dataset": SHAREGPT_CSV}
    # a lognormal stand-in reads no file; the default clock reads its profile and engine model
    assert data_files(load_experiment(write_config(tiny(cost_model="roofline")))) == {}
    assert set(data_files(load_experiment(write_config(tiny())))) == {"cost_model.path", "cost_model.host"}


def test_a_head_dim_of_its_own_moves_the_digest_and_the_implied_one_is_not_in_it(write_config):
    exp = load_experiment(write_config(tiny()))
    plain = digest_with_model(exp)
    implied = exp.model.hidden_size // exp.model.num_heads
    assert exp.model.head_dim == implied and "head_dim" not in spec_values(exp)["model"]  # digests as before
    assert digest_with_model(exp, head_dim=implied) == plain
    assert digest_with_model(exp, head_dim=2 * implied) != plain  # wider heads: more KV bytes, more FLOPs
