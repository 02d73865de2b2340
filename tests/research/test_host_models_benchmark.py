"""research/cost_models/host_models.py without /work/shared: a folder whose tables are not the shipped fits' says
so."""
from __future__ import annotations

from research.cost_models import host_models
from tests.calibrate.synthetic_host import write_table


def test_the_benchmark_refits_compares_and_marks_each_figure(tmp_path, capsys, monkeypatch):
    (tmp_path / "host").mkdir()
    write_table(tmp_path / "host" / "a100.cpu_overheads.2024-05.csv")  # not what vllm-a100-2024-05 was fitted on
    monkeypatch.setattr("sys.argv", ["host_models.py", str(tmp_path)])
    host_models.main()
    out = capsys.readouterr().out
    assert "a100.cpu_overheads.2024-01.csv not found: nothing refitted" in out
    assert "| vllm-a100-2024-05 | one model out | 126 | 0.0% (meets <= 10%) | NO: refit" in out
    assert "| vllm-a100-2024-05 | batch >= 128 | 18 | 0.0% (meets <= 10%) |" in out
    assert "| llama-7b, tp 1, 8 decodes |" in out


def test_a_figure_past_its_target_is_marked_a_miss():
    assert host_models.mark(0.125) == "12.5% (misses <= 10%)" and host_models.mark(None) == "n/a"
