"""acceptance: {table, dataset}: a published measurement's row read into the conditional rates it implies, every row
with its source; a method, model, dataset, proposer or k the table has no row for is a one-line error naming the key
and what the table has; and a run with the table is the run with the same rates given inline."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from engine.errors import SpecError
from sim.experiment.acceptance_table import SHIPPED_TABLES, load_table
from sim.experiment.config import experiment_from_dict
from sim.experiment.run import run_one
from tests.helpers.configs import tiny

EAGLE3 = "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"
# vLLM's regression baseline for that head on MT-Bench: the drafts whose proposal 1, 2, 3 was accepted (the table's)
REACHED = (0.7296, 0.5208, 0.3545)


def speculative(method: str = "eagle", k: int = 3, **acceptance: str) -> str:
    fields = ", ".join(f"{name}: {value}" for name, value in acceptance.items())
    return f"{{method: {method}, num_speculative_tokens: {k}, acceptance: {{{fields}}}}}"


def experiment(tmp_path, spec: str, model: str = "llama-3.1-8b"):
    text = tiny(model=model, max_model_len="2048", systems=f"[{{preset: vllm, name: spec, speculative: {spec}}}]")
    return experiment_from_dict(yaml.safe_load(text), str(tmp_path / "tiny.yaml"), tmp_path)


def rates(tmp_path, spec: str, model: str = "llama-3.1-8b") -> tuple[float, ...]:
    return experiment(tmp_path, spec, model).systems[0].speculative.rates


def refused(tmp_path, spec: str, key: str, *fragments: str, model: str = "llama-3.1-8b") -> None:
    with pytest.raises(SpecError) as err:
        experiment(tmp_path, spec, model)
    message = str(err.value)
    assert "\n" not in message and f": {key}: " in message, message
    for fragment in fragments:
        assert fragment in message, message


def test_every_shipped_row_carries_its_source_and_date():
    for path in SHIPPED_TABLES.folder.glob("*.yaml"):
        for row in load_table(path):
            assert "http" in row.source and row.published, row


def test_a_row_is_read_as_the_conditional_rates_of_its_per_position_acceptance(tmp_path):
    table = dict(table="published", dataset="mt-bench", proposer=EAGLE3)
    conditional = (REACHED[0], REACHED[1] / REACHED[0], REACHED[2] / REACHED[1])
    assert rates(tmp_path, speculative(**table)) == conditional
    assert rates(tmp_path, speculative(k=2, **table)) == conditional[:2]  # a chain's first proposals, whatever follow
    # another model's row, borrowed by naming it
    assert rates(tmp_path, speculative(model="llama-3.1-8b", **table), model="opt-13b") == conditional


def test_a_mean_acceptance_length_is_one_rate_at_its_own_k(tmp_path):
    spec = experiment(tmp_path, speculative(k=7, table="published", dataset="mt-bench",
                                            proposer="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")).systems[0].speculative
    assert len(set(spec.rates)) == 1 and spec.expected_accepted == pytest.approx(3.53 - 1)
    refused(tmp_path, speculative(k=6, table="published", dataset="mt-bench",
                                  proposer="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"),
            "systems[0].speculative.num_speculative_tokens", "k = 7")


def test_what_the_table_has_no_row_for_is_refused_naming_the_key_and_the_choices(tmp_path):
    key = "systems[0].speculative.acceptance"
    refused(tmp_path, speculative(table="published", dataset="sharegpt", proposer=EAGLE3), f"{key}.dataset",
            "'sharegpt'", "mt-bench", "blazedit-5k")
    refused(tmp_path, speculative(table="published", dataset="mt-bench"), f"{key}.model", "llama-3-70b",
            "llama-3.1-8b", model="llama-3-70b")
    refused(tmp_path, speculative(table="published", dataset="mt-bench"), f"{key}.proposer", EAGLE3,
            "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    refused(tmp_path, speculative(table="published", dataset="mt-bench", proposer="medusa"), f"{key}.proposer",
            "'medusa'", EAGLE3)
    refused(tmp_path, speculative(method="mtp", table="published", dataset="mt-bench"), f"{key}.table", "'mtp'",
            "eagle", "ngram")
    refused(tmp_path, speculative(k=4, table="published", dataset="mt-bench", proposer=EAGLE3),
            "systems[0].speculative.num_speculative_tokens", "1 to 3")
    refused(tmp_path, speculative(table="publishd", dataset="mt-bench"), f"{key}.table", "did you mean 'published'")
    refused(tmp_path, speculative(table="published", datset="mt-bench"), f"{key}.datset", "valid keys")
    refused(tmp_path, speculative(table="published"), f"{key}.dataset", "a name")


def test_a_table_of_ones_own_is_read_beside_the_config_and_checked_row_by_row(tmp_path):
    row = {"method": "ngram", "model": "llama-3.1-8b", "proposer": "prompt-lookup", "dataset": "mine",
           "num_speculative_tokens": 2, "acceptance_at": [0.5, 0.25], "source": "a test", "published": "today"}
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({"rows": [row]}))
    assert rates(tmp_path, speculative(method="ngram", k=2, table="mine.yaml", dataset="mine")) == (0.5, 0.5)
    for change, key in (({"source": None}, "rows[0].source"), ({"mean_acceptance_length": 1.5}, "rows[0]"),
                        ({"acceptance_at": [0.5, 0.6]}, "rows[0].acceptance_at[1]")):
        (tmp_path / "mine.yaml").write_text(yaml.safe_dump({"rows": [{**row, **change}]}))
        with pytest.raises(SpecError) as err:
            experiment(tmp_path, speculative(method="ngram", k=2, table="mine.yaml", dataset="mine"))
        assert "mine.yaml" in str(err.value) and f": {key}: " in str(err.value), str(err.value)


def test_a_run_with_the_table_is_the_run_with_its_rates_inline(tmp_path):
    table = experiment(tmp_path, speculative(table="published", dataset="mt-bench", proposer=EAGLE3))
    conditional = table.systems[0].speculative.rates
    inline = experiment(tmp_path, speculative(rates=list(conditional)))
    assert table.systems == inline.systems
    one, other = (run_one(exp, exp.systems[0], 2.0, 0) for exp in (table, inline))
    assert repr(one.summary) == repr(other.summary)  # NaN where nothing was measured: equal only as text
    for name, column in one.request_arrays.items():
        assert np.array_equal(column, other.request_arrays[name]), name
    for name in one.iteration_arrays:
        assert np.array_equal(one.iteration_arrays[name], other.iteration_arrays[name]), name
