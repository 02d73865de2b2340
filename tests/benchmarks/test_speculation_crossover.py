"""benchmarks/serving/speculation_crossover.py: the rate where speculation's TPOT climbs back to the plain system's,
interpolated between the swept rates that bracket it, told apart where it falls past saturation or outside the
sweep, and read off a summary as `servesim run` writes it."""
from __future__ import annotations

import csv

import pytest

from benchmarks.serving import speculation_crossover as sc


def test_the_crossover_is_interpolated_between_the_rates_that_bracket_it():
    rate, reading = sc.crossover([2, 10, 20], plain=[0.02, 0.03, 0.06], speculating=[0.01, 0.02, 0.08])
    # gaps -0.01 at 10 and +0.02 at 20: a third of the way
    assert rate == pytest.approx(10 + 10 / 3) and reading == "13.3"


def test_a_crossover_outside_the_sweep_or_past_saturation_is_said_so():
    assert sc.crossover([2, 10], [0.02, 0.03], [0.03, 0.04]) == (None, "below 2")
    assert sc.crossover([2, 10], [0.02, 0.03], [0.01, 0.02]) == (None, "none up to 10")
    assert sc.crossover([2, 10], [0.02, 0.03], [0.01, 0.05], [False, True])[1].endswith("(saturated)")


def test_the_table_is_read_off_a_summary_with_seeds_averaged(tmp_path, capsys):
    rows = [("plain", 2, 0, 0.020), ("plain", 10, 0, 0.030), ("spec", 2, 0, 0.010), ("spec", 10, 0, 0.050),
            ("spec", 10, 1, 0.030)]  # spec's two seeds at 10 average 0.04
    with (tmp_path / "summary.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["experiment", "system", "rate", "seed", "tpot_mean_s", "ttft_mean_s", "saturated"])
        writer.writerows([("x", system, rate, seed, tpot, 0.1, "False") for system, rate, seed, tpot in rows])
    sc.main([str(tmp_path), "--no-plots"])
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("spec"))
    # gaps -0.01 at 2 and +0.01 at 10: halfway, at 6
    assert line.split()[1] == "6.0" and line.split()[-2:] == ["0.50", "1.33"]


def test_a_plain_system_not_in_the_summary_is_named(tmp_path):
    with (tmp_path / "summary.csv").open("w", newline="") as f:
        f.write("experiment,system,rate,seed,tpot_mean_s,ttft_mean_s,saturated\nx,a,1,0,0.1,0.1,False\n")
    with pytest.raises(SystemExit, match="no system 'b' in the summary"):
        sc.main([str(tmp_path), "--plain", "b", "--no-plots"])
