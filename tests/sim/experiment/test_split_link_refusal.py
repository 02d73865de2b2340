"""A KV link too slow for any copy to end inside a run is refused where `split.kv_link` is read, in one line naming
the figure (a custom link's own key, or the sheet's for a spec-sheet link) and the least that passes."""
from __future__ import annotations

import pytest

from engine.errors import SpecError
from servesim.cli import main
from sim.experiment.config import load_experiment
from tests.helpers.configs import tiny


def custom_link(bytes_per_s: str, latency_s: str = "1.0e-5") -> str:
    return ("{prefill: {replicas: 1}, decode: {replicas: 1}, "
            f"kv_link: {{kind: custom, bytes_per_s: {bytes_per_s}, latency_s: {latency_s}}}}}")


@pytest.mark.parametrize("link, key, words", [
    (custom_link("1.0e-300"), "split.kv_link.bytes_per_s", "1e-300 B/s: one token's KV (819,200 bytes over 1 GPU) "
                                                           "takes 8.19e+305 s, longer than the longest workload "
                                                           "(86400 s of arrivals); must be at least 9.49 B/s"),
    (custom_link("9.48"), "split.kv_link.bytes_per_s", "must be at least 9.49 B/s"),
    (custom_link("1.0e10", "1.0e300"), "split.kv_link.latency_s", "1e+300 s of latency: one token's KV"),
])
def test_a_link_no_copy_could_cross_within_a_run_is_refused_where_it_is_read(write_config, link, key, words):
    with pytest.raises(SpecError) as refused:
        load_experiment(write_config(tiny(split=link, systems="[vllm]")))
    assert refused.value.key == key and words in refused.value.message and "\n" not in str(refused.value)
    load_experiment(write_config(tiny(split=custom_link("9.49"), systems="[vllm]")))  # the least that passes


def test_a_sheets_link_too_slow_is_refused_naming_the_sheets_figure(write_config, tmp_path):
    sheet = (tmp_path / "slow-gpu.yaml")
    sheet.write_text("name: slow-gpu\npeak_flops: 312.0e+12\nhbm_bytes_per_s: 1.555e+12\nmemory_gib: 39.59\n"
                     "nvlink_bytes_per_s: 1.0e-300\npcie_bytes_per_s: 32.0e+9\n")
    split = "{prefill: {replicas: 1}, decode: {replicas: 1}, kv_link: nvlink}"
    with pytest.raises(SpecError) as refused:
        load_experiment(write_config(tiny(split=split, systems="[vllm]", hardware=str(sheet))))
    assert refused.value.key == "split.kv_link"
    assert "slow-gpu sheet nvlink_bytes_per_s" in refused.value.message and "must be at least" in refused.value.message


def test_the_command_refuses_it_in_one_line_writing_nothing(write_config, tmp_path, capsys):
    config = write_config(tiny(split=custom_link("1.0e-300"), systems="[vllm]"))
    assert main(["run", str(config), "--out", str(tmp_path / "out"), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "split.kv_link.bytes_per_s" in err and not (tmp_path / "out").exists()
