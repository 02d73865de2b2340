"""The paper decided at its lengths: the shipped run's claims table is what the claim readers find in its
figures' summaries, every claim with a value and a verdict (none undecided), and its configs charge host time."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from sim.reproduce.claims import CLAIMS
from sim.reproduce.figures import FIGURES
from sim.reproduce.results import SUMMARY_FILE, Results
from sim.reproduce.table import claims_table

REFERENCE = Path(__file__).resolve().parents[3] / "results" / "reference" / "reproduce_paper_lengths"


def test_every_claim_is_read_from_the_shipped_run_and_decided(tmp_path):
    for name in FIGURES:  # the run's layout, as Results.load reads a reproduce folder
        (tmp_path / name).mkdir()
        shutil.copy(REFERENCE / f"{name}_summary.csv", tmp_path / name / SUMMARY_FILE)
    table = claims_table(Results.load(tmp_path))
    shipped = pd.read_csv(REFERENCE / "paper_vs_sim.csv", keep_default_na=False)
    assert list(table["claim"]) == list(shipped["claim"]) == [claim.id for claim in CLAIMS]  # none dropped
    assert (table["simulated"] != "").all() and set(table["lands"]) <= {"yes", "no"}  # 0 undecided
    assert list(table["simulated"]) == list(shipped["simulated"])
    assert list(table["lands"]) == list(shipped["lands"])
