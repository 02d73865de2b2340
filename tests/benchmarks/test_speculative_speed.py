"""benchmarks/speed/speculative_speed.py at a tiny scale: the plain system (fast-forwarded and stepped through) and
the speculating one run the same trace, each round prints all three, the summary lines carry the medians, the ratio
and the target (never a time asserted), and the speculating run stepped through has the same records."""
from __future__ import annotations

import re

import pytest

from benchmarks.speed import speculative_speed


@pytest.mark.slow
def test_a_tiny_run_times_both_systems_beside_the_target(capsys):
    speculative_speed.main(["--duration-s", "20", "--repeats", "2"])
    out = capsys.readouterr().out
    rounds = re.findall(r"round (\d) (.+?) +[\d.]+ s +(\d+) iterations", out)
    names = ("vLLM V1", "vLLM V1 stepped", "eagle k=3")
    assert [(n, name.strip()) for n, name, _ in rounds] == [(str(n), name) for n in (1, 2) for name in names]
    iterations = {name: {int(it) for _, ran, it in rounds if ran.strip() == name} for name in names}
    # the same records each round, and stepped through as fast-forwarded; a speculating step advances further
    assert iterations["vLLM V1"] == iterations["vLLM V1 stepped"]
    assert all(len(counts) == 1 for counts in iterations.values())
    assert 0 < min(iterations["eagle k=3"]) < min(iterations["vLLM V1"])
    assert re.search(r"^plain_s=[\d.]+ speculating_s=[\d.]+ ratio=[\d.]+ \(target <= 2: (met|missed)\)$", out,
                     flags=re.MULTILINE)
    assert re.search(r"^stepped_s=[\d.]+ speculating_over_stepped=[\d.]+$", out, flags=re.MULTILINE)
    # fast-forwarded, the speculating run's records are its stepped run's
    assert re.search(r"^eagle k=3 stepped through: records \w+ \(the same\)$", out, flags=re.MULTILINE)


def test_the_proposer_may_be_swapped_for_an_ngram_lookup(capsys):
    speculative_speed.main(["--duration-s", "10", "--repeats", "1", "--method", "ngram"])
    assert "round 1 eagle k=3, ngram" in capsys.readouterr().out
