"""`servesim reproduce`: the paper configs behind each figure through the sweep (resumable, atomic),
then each figure's folder, then the paper-against-simulation table.

OUT/
  sweeps/<scale>/<config>/runs/...   every run, as `servesim run` writes them (a rerun skips the done ones)
  <figure>/summary.csv               every run's summary row behind the figure, tagged with its panel (and a
                                     cost-model panel's predicted rows)
  <figure>/plotted.csv               the numbers the figure draws
  <figure>/sustainable_rates.csv     (normalized-latency figures) each curve's sustainable rate
  <figure>/<figure>.png, .svg        the figure in the paper's layout
  paper_vs_sim.csv, .md              one row per claim of the paper
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from engine.atomic import remove_stale_temporaries
from sim.executors.spec import ExecutorSpec
from sim.experiment.config import Experiment, apply_overrides, experiment_from_dict, load_experiment, read_config
from sim.experiment.output import DEFAULT_ITERATIONS, prepare_out_dir, write_csv
from sim.experiment.progress import Eta, duration_text
from sim.experiment.sweep import PendingRun, plan, run_cost, run_keys, run_pending, summary_frame
from sim.reproduce.crossing import MAX_EXTRA_PROBES, Probe, crossing_notes, probes_for
from sim.reproduce.figures import SYSTEM_ORDER, Figure, Panel, Source, paper_config, select
from sim.reproduce.panels import PANEL_KINDS
from sim.reproduce.readings import THRESHOLD_S_PER_TOKEN
from sim.reproduce.results import Results
from sim.reproduce.scale import PAPER, PREDICTED, Scale
from sim.reproduce.table import write_table

# a workload label's arrival process and rate (sim/workload/config.py), which differ between the runs of a figure
ARRIVALS = re.compile(r"; \w+( cv=\S+)? arrivals at \S+ req/s for \S+ s")


@dataclass
class Sweep:
    panel: Panel
    source: Source
    experiment: Experiment
    # the runs past the configured rates, one system and rate each, that found the curves' crossings (crossing.py)
    probes: list[Experiment] = field(default_factory=list)

    @property
    def experiments(self) -> list[Experiment]:
        return [self.experiment, *self.probes]

    def probe(self, probe: Probe) -> Experiment:
        system = next(spec for spec in self.experiment.systems if spec.name == probe.system)
        return replace(self.experiment, systems=(system,), rates=(probe.rate,))


def load_sweeps(figure: Figure, scale: Scale) -> list[Sweep]:
    """Every config behind the figure, cut to the scale and checked, before anything runs."""
    sweeps = []
    for panel, source in figure.sources:
        path = paper_config(source.config)
        raw = read_config(path, list(source.overrides))
        raw = apply_overrides(raw, scale.overrides(raw, source.thin), str(path))
        sweeps.append(Sweep(panel, source, experiment_from_dict(raw, str(path), path.parent)))
    return sweeps


def predicted_rows(figure: Figure) -> list[pd.DataFrame]:
    """The rows of the figure's cost-model panels: no trace, so the same at every scale."""
    frames = []
    for panel in figure.panels:
        if panel.cost_model_of:
            exp = load_experiment(paper_config(panel.cost_model_of))
            rows = PANEL_KINDS[panel.kind].predict(exp)
            frames.append(rows.assign(figure=figure.name, panel=panel.id, series="", scale=PREDICTED))
    return frames


def reproduce(names: list[str], out_dir: Path, scale: Scale = PAPER, jobs: int = 1, progress=print) -> pd.DataFrame:
    """Run the figures asked for, write their folders and the claims table; returns the table."""
    figures = select(names)
    out_dir = prepare_out_dir(Path(out_dir))
    plans = {figure.name: load_sweeps(figure, scale) for figure in figures}
    predicted = {figure.name: predicted_rows(figure) for figure in figures}
    sweeps_dir = out_dir / "sweeps" / scale.name
    eta = Eta()
    progress(f"servesim: reproducing {', '.join(plans)} ({scale.description}) -> {out_dir}")
    executor = ExecutorSpec("process", jobs)
    run_every_pending([(sweeps_dir / s.source.runs_dir, s.experiment) for sweeps in plans.values() for s in sweeps],
                      executor, eta, progress)
    probe_crossings([s for sweeps in plans.values() for s in sweeps], sweeps_dir, executor, eta, progress,
                    scale.max_extra_probes)
    for figure in figures:
        rows = [_summary(s, figure, sweeps_dir, scale) for s in plans[figure.name]] + predicted[figure.name]
        notes = [note for s in plans[figure.name] for note in _crossing_notes(s, sweeps_dir)]
        paths = write_figure(figure, pd.concat(rows, ignore_index=True), out_dir / figure.name, scale, notes)
        progress(f"{figure.name}: wrote {', '.join(p.name for p in paths)} in {out_dir / figure.name}")
    table = write_table(out_dir, Results.load(out_dir))
    progress(f"wrote {out_dir / 'paper_vs_sim.md'} and .csv after {duration_text(eta.elapsed)}")
    return table


def run_every_pending(sweeps: list[tuple[Path, Experiment]], executor: ExecutorSpec, eta: Eta, progress) -> None:
    """Every run not done yet in these sweep folders (sweeps sharing a folder pick different runs of it), in
    one pool, costliest first: a sweep at a time left all processes but one idle while each config's last
    run finished."""
    pending: dict[Path, PendingRun] = {}
    done: set[Path] = set()
    for out, exp in sweeps:
        summaries, todo = plan(exp, prepare_out_dir(out))
        done.update(out / "runs" / key.slug for key in summaries)
        for run in todo:
            pending.setdefault(run.run_dir, run)
    if done:
        progress(f"resuming: {len(done)} runs already done in {len({out for out, _ in sweeps})} sweep folders")
    if not pending:
        return
    runs = sorted(pending.values(), key=run_cost, reverse=True)
    for run in runs:
        eta.expect(1, run.work)
    progress(f"{len(runs)} runs of {len({run.exp.name for run in runs})} configs, costliest first")
    # no more workers than runs: a process pool forks every worker it may use up front
    with replace(executor, jobs=min(executor.jobs, len(runs))).open() as workers:
        for _ in run_pending(runs, workers, DEFAULT_ITERATIONS, progress, eta):
            pass


def probe_crossings(sweeps: list[Sweep], sweeps_dir: Path, executor: ExecutorSpec, eta: Eta, progress,
                    max_extra: int = MAX_EXTRA_PROBES) -> None:
    """Rounds of runs past each latency curve's configured rates, until every curve crosses the threshold
    (or has spent its probes): all the curves' next probes of a round in one pool."""
    curves = [s for s in sweeps if s.panel.kind == "latency"]
    for _ in range(max_extra):
        asks = [(s, s.probe(probe)) for s in curves
                for probe in probes_for(_curve_points(_rows(s, sweeps_dir)), s.experiment.rates, max_extra)]
        if not asks:
            return
        progress(f"probing past the configured rates for a crossing of {THRESHOLD_S_PER_TOKEN:g} s/token: "
                 + ", ".join(f"{exp.name} {exp.systems[0].name} at {exp.rates[0]:g} req/s" for _, exp in asks))
        run_every_pending([(sweeps_dir / s.source.runs_dir, exp) for s, exp in asks], executor, eta, progress)
        for s, exp in asks:
            s.probes.append(exp)


def _curve_points(rows: pd.DataFrame) -> dict[str, dict[float, float]]:
    """Each system's normalized latency by rate (mean over seeds)."""
    means = rows.groupby(["system", "rate"], sort=False)["normalized_latency"].mean()
    curves: dict[str, dict[float, float]] = {}
    for (system, rate), latency in means.items():
        curves.setdefault(system, {})[float(rate)] = float(latency)
    return curves


def _crossing_notes(s: Sweep, sweeps_dir: Path) -> list[str]:
    if s.panel.kind != "latency" or not s.probes:
        return []
    prefix = f"({s.panel.id}) " if s.panel.id else ""
    notes = crossing_notes(_curve_points(_rows(s, sweeps_dir)), s.experiment.rates, s.panel.xlim)
    return [prefix + note for note in notes]


def _rows(s: Sweep, sweeps_dir: Path) -> pd.DataFrame:
    """The summary rows of the sweep's runs and of its probes past the configured rates, in legend order,
    then by rate."""
    folder = sweeps_dir / s.source.runs_dir
    rows = []
    for exp in s.experiments:
        summaries, pending = plan(exp, folder)
        if pending:
            raise RuntimeError(f"{len(pending)} runs of {exp.name} in {folder} went missing "
                               "after they were simulated; run again to redo them")
        rows += [summaries[key] for key in run_keys(exp)]
    summary = summary_frame(rows)
    if s.probes:
        order = {name: i for i, name in enumerate(SYSTEM_ORDER)}
        summary = summary.sort_values(["system", "rate", "seed"], kind="stable",
                                      key=lambda c: c.map(order) if c.name == "system" else c).reset_index(drop=True)
    return summary


def _summary(s: Sweep, figure: Figure, sweeps_dir: Path, scale: Scale) -> pd.DataFrame:
    """The sweep's summary rows (run_every_pending simulated them), tagged for the figure."""
    exp = s.experiment
    summary = _rows(s, sweeps_dir)
    systems = {system.name: system for system in exp.systems}
    return summary.assign(
        figure=figure.name, panel=s.panel.id, series=s.source.label, scale=scale.description,
        n=exp.workload.n or 1, beam_width=exp.workload.beam_width or 1,
        block_size=summary["system"].map(lambda name: systems[name].block_size),
        preemption=summary["system"].map(lambda name: systems[name].preemption),
    )


def write_figure(figure: Figure, rows: pd.DataFrame, folder: Path, scale: Scale, notes: list[str] = ()) -> list[Path]:
    from sim.reproduce.paper_plots import draw_figure, save_figure  # matplotlib: only when drawing

    remove_stale_temporaries(folder)
    front = ["figure", "panel", "series", "scale"]
    rows = rows[front + [c for c in rows.columns if c not in front]]
    points = {p.id: PANEL_KINDS[p.kind].points(rows[rows["panel"] == p.id]) for p in figure.panels}
    plotted = pd.concat([frame.assign(scale=PREDICTED if p.cost_model_of else scale.description)
                         for p, frame in zip(figure.panels, points.values())],
                        keys=list(points), names=["panel", None]).reset_index(level=0).reset_index(drop=True)
    paths = [write_csv(rows, folder / "summary.csv"), write_csv(plotted, folder / "plotted.csv")]
    latency_panels = [p for p in figure.panels if p.kind == "latency"]
    if latency_panels:
        paths.append(write_csv(sustainable_rates(rows, latency_panels).assign(scale=scale.description),
                               folder / "sustainable_rates.csv"))
    return paths + save_figure(draw_figure(figure, points, footer(figure, rows, scale) + list(notes)),
                               folder / figure.name)


def footer(figure: Figure, rows: pd.DataFrame, scale: Scale) -> list[str]:
    """What a reader of the figure must know: a cut trace, a stand-in workload, a cost model's prediction."""
    lines = [] if scale.is_paper else [scale.description]
    workloads = rows["workload"].dropna() if "workload" in rows else pd.Series(dtype=str)
    lines += [f"Workload: {label}" for label in dict.fromkeys(workloads.map(lambda w: ARRIVALS.sub("", w)))]
    if any(p.kind == "latency" for p in figure.panels):
        lines.append("Hollow markers: not every request finished within the run's horizon (a lower bound).")
    for panel in figure.panels:
        if panel.cost_model_of:
            source = rows.loc[rows["panel"] == panel.id, "cost_model"].iloc[0]
            lines.append(f"({panel.id}) not simulated: the prediction of {panel.cost_model_of}'s cost model, {source}")
    return lines


def sustainable_rates(rows: pd.DataFrame, panels: list[Panel]) -> pd.DataFrame:
    results = Results({"figure": rows})
    records = []
    for panel in panels:
        for system, rate in results.sustainable("figure", panel.id).items():
            records.append({"panel": panel.id, "system": system, "threshold_s_per_token": THRESHOLD_S_PER_TOKEN,
                            "sustainable_rate": rate.text("{:.3g}"), "low": rate.low, "high": rate.high})
    return pd.DataFrame(records)
