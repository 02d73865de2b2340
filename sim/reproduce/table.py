"""paper_vs_sim.csv and .md: one row per claim, with the paper's value, the simulated one, how it was
read, and whether it lands in the paper's range; a claim without a value says why."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from engine.atomic import write_text_atomic
from sim.experiment.output import write_csv
from sim.reproduce.claims import CLAIMS, Claim
from sim.reproduce.readings import COMPARABLE, NEAR_BEST, POINT_TOLERANCE, THRESHOLD_S_PER_TOKEN
from sim.reproduce.results import NotRun, Results
from sim.reproduce.scale import PREDICTED

COLUMNS = ("claim", "figure", "basis", "statement", "paper", "simulated", "lands", "read_as", "note", "scale")


def evaluate(claim: Claim, results: Results) -> dict:
    row = {"claim": claim.id, "figure": claim.figure, "basis": claim.basis, "statement": claim.statement,
           "paper": claim.paper, "simulated": "", "lands": "n/a", "read_as": "", "note": "",
           "scale": PREDICTED if claim.predicted else results.scale(claim.data)}
    try:
        reading = claim.read(results)
    except NotRun as missing:
        return {**row, "note": str(missing)}
    return {**row, "simulated": reading.simulated, "lands": reading.lands, "read_as": reading.how,
            "note": reading.note}


def claims_table(results: Results) -> pd.DataFrame:
    return pd.DataFrame([evaluate(claim, results) for claim in CLAIMS], columns=list(COLUMNS))


def tally(table: pd.DataFrame) -> str:
    counts = table["lands"].value_counts()
    return (f"{len(table)} claims: {counts.get('yes', 0)} land in the paper's range, {counts.get('no', 0)} do not, "
            f"{counts.get('n/a', 0)} undecided or without a value")


def markdown(table: pd.DataFrame, results: Results) -> str:
    scales = {figure: results.scale(figure) for figure in results.frames}
    lines = [
        "# The paper against the simulation",
        "",
        "Written by `servesim reproduce`. One row per quantitative claim the PagedAttention paper (Kwon et al., "
        "SOSP 2023) makes about Figs. 2 and 12-19. " + tally(table) + ".",
        "",
        "Reading rules: " + "; ".join([
            f"a sustainable rate is where a curve's mean normalized latency first reaches {THRESHOLD_S_PER_TOKEN:g} "
            "s/token (linear between the simulated rates around it; a curve that never does sustains at least "
            "its highest rate, a bound)",
            f"a single printed value lands within +-{POINT_TOLERANCE:.0%} of it, a printed range as printed",
            f"Fig. 18b's best block sizes are those within {NEAR_BEST:.0%} of the lowest latency",
            f"Fig. 19b's comparable means within {COMPARABLE:.0%}",
            "a bound lands only if all of it is in the range (else n/a)"]) + ".",
        "",
        "Trace lengths behind each figure: " + ("; ".join(f"{fig}: {scale}" for fig, scale in scales.items())
                                               or "no figure reproduced yet") + ".",
        "",
        "| claim | fig. | the paper | paper | simulated | lands | read as / why no value |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, row in table.iterrows():
        how = "; ".join(part for part in (row["read_as"], row["note"]) if part)
        cells = [row["claim"], row["figure"], row["statement"], row["paper"], row["simulated"], row["lands"], how]
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def write_table(out_dir: Path, results: Results) -> pd.DataFrame:
    table = claims_table(results)
    write_csv(table, Path(out_dir) / "paper_vs_sim.csv")
    write_text_atomic(Path(out_dir) / "paper_vs_sim.md", markdown(table, results))
    return table
