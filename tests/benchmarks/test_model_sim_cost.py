"""benchmarks/speed/model_sim_cost.py at a tiny scale: both deployments run the same arrivals, alternating, and the
record has a row per deployment with its medians and spreads and the ratio against the target (never a time
asserted)."""
from __future__ import annotations

import re

import pytest

from benchmarks.speed import model_sim_cost


def test_a_tiny_run_times_both_deployments_and_writes_the_record(tmp_path, capsys):
    record = tmp_path / "model_sim_cost.md"
    model_sim_cost.main(["--scale", "0.004", "--repeats", "2", "--record", str(record), "--machine", "a test"])
    out = capsys.readouterr().out
    runs = re.findall(r"^(.+): run (\d): .* (\d+) requests, (\d+) iterations", out, flags=re.MULTILINE)
    assert [(name, n) for name, n, _, _ in runs] == [(name, str(n)) for n in (1, 2) for name in model_sim_cost.SETTINGS]
    requests = {name: int(r) for name, _, r, _ in runs}
    assert len(set(requests.values())) == 1 and min(requests.values()) > 0  # the same trace for both
    text = record.read_text()
    for name in model_sim_cost.SETTINGS:
        cells = r"\d+ \| [\d.]+ \(\d+%\) \| [\d.]+ \(\d+%\) \| [\d.]+"
        assert re.search(rf"^\| {re.escape(name)} \| {requests[name]} \| {cells} \|$", text, flags=re.MULTILINE)
    assert re.search(r"per simulated request \(target <= 1\.00x: (met|NOT met)\); [\d.]+x per iteration priced\.$",
                     text, flags=re.MULTILINE)
    assert "14.4 s of the quickstart's arrivals" in text and "a test" in text


def test_the_70b_run_changes_only_the_deployment():
    opt, big = (model_sim_cost.overrides(name, 1.0) for name in model_sim_cost.SETTINGS)
    assert opt[:4] == big[:4] and "workload.duration_s=3600" in opt
    assert {"model=llama-3-70b", "hardware=h100-sxm", "tensor_parallel=4"} <= set(big[4:])


@pytest.mark.parametrize("argv", [["--scale", "0"], ["--scale", "2"], ["--repeats", "0"]])
def test_a_scale_or_repeat_count_out_of_range_is_refused(argv, capsys):
    with pytest.raises(SystemExit):
        model_sim_cost.main(argv)
    assert "--scale is in (0, 1]" in capsys.readouterr().err
