"""research/cost_models/llmservingsim_profiles.py without the bundles says so, and marks a figure by its target."""
from __future__ import annotations

from research.cost_models import llmservingsim_profiles


def test_without_the_bundles_nothing_is_refitted_and_it_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SERVESIM_LLMSERVINGSIM_PERF", raising=False)
    assert llmservingsim_profiles.main([str(tmp_path / "absent")]) == 0
    assert "no bundles: give LLMServingSim's profiler/perf folder" in capsys.readouterr().out


def test_a_figure_is_marked_against_the_five_percent_target():
    assert llmservingsim_profiles.mark(0.033) == "3.3% (meets <= 5%)"
    assert llmservingsim_profiles.mark(0.0503) == "5.0% (misses <= 5%)"
