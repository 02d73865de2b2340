"""The paper's figures as `servesim reproduce` runs them: each a set of panels, each panel the sweeps
(paper configs, with overrides) behind it.

A figure that another feature will make runnable is one entry: a Panel in FIGURES (its config, its
place in the grid) and the line in NOT_RUNNABLE or a figure's `missing` removed. The claims that
read it are in sim/reproduce/claims.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from engine.specs.errors import SpecError

# The paper orders its legends so (Figs. 12-14, 17); every figure here keeps that order and its colours.
SYSTEM_ORDER = ("FasterTransformer", "Orca (Max)", "Orca (Pow2)", "Orca (Oracle)", "vLLM")
ORCA_AND_VLLM = "systems=[orca-max, orca-pow2, orca-oracle, vllm]"
# The paper does not print Fig. 2's rate. Fig. 2 describes "the experiment in section 6.2", OPT-13B on
# ShareGPT, whose batching Fig. 13 reports at 2 req/s: so Fig. 2 is read there too.
FIG2_RATE = 2.0
FIG13_RATES = {"sharegpt": 2.0, "alpaca": 30.0}  # the paper's Fig. 13 caption


@dataclass(frozen=True)
class Source:
    """One sweep behind a panel: a config of configs/paper, with --set overrides."""

    config: str
    overrides: tuple[str, ...] = ()
    label: str = ""  # the series this sweep draws, where a panel has several (Fig. 18b: ShareGPT, Alpaca)
    thin: bool = True  # whether --quick may drop rates (not where the rate is the figure's point)

    @property
    def runs_dir(self) -> str:
        """Sweeps that differ only in which runs they pick (rates, systems) share one folder, so a run is
        simulated once for every figure that reads it (Fig. 13 reads Fig. 12's runs at 2 req/s)."""
        from sim.fingerprint import SWEEP_KEYS  # pandas and the configs: not on the CLI's start-up path

        changes = sorted(o for o in self.overrides if o.split("=", 1)[0] not in SWEEP_KEYS)
        suffix = re.sub(r"[^A-Za-z0-9.]+", "-", "_".join(changes)).strip("-")
        return Path(self.config).stem + (f"-{suffix}" if suffix else "")


@dataclass(frozen=True)
class Panel:
    id: str  # "a", "b", ...: the paper's panel letter, or "" for a one-panel figure
    caption: str
    kind: str  # how it is drawn and tabulated: a key of sim/reproduce/panels.py's PANEL_KINDS
    sources: tuple[Source, ...]
    position: tuple[int, int] = (0, 0)  # row, column in the paper's grid
    xlim: tuple[float, float] | None = None  # the paper's axis ranges
    ylim: tuple[float, float] | None = None


@dataclass(frozen=True)
class Figure:
    name: str
    title: str
    panels: tuple[Panel, ...]
    missing: tuple[str, ...] = ()  # the paper's panels not drawn on this branch, and why

    @property
    def sources(self) -> list[tuple[Panel, Source]]:
        return [(panel, source) for panel in self.panels for source in panel.sources]


def _latency(pid: str, caption: str, config: str, position: tuple[int, int], xmax: float) -> Panel:
    return Panel(pid, caption, "latency", (Source(config),), position, (0, xmax), (0, 1.0))


FIG12 = Figure("fig12", "Fig. 12: single sequence generation, normalized latency against request rate", (
    _latency("a", "(a) OPT-13B, 1 GPU, ShareGPT", "fig12a_sharegpt_opt13b.yaml", (0, 0), 2),
    _latency("b", "(b) OPT-66B, 4 GPUs, ShareGPT", "fig12b_sharegpt_opt66b.yaml", (0, 1), 1),
    _latency("c", "(c) OPT-175B, 8 GPUs, ShareGPT", "fig12c_sharegpt_opt175b.yaml", (0, 2), 2.5),
    _latency("d", "(d) OPT-13B, 1 GPU, Alpaca", "fig12d_alpaca_opt13b.yaml", (1, 0), 30),
    _latency("e", "(e) OPT-66B, 4 GPUs, Alpaca", "fig12e_alpaca_opt66b.yaml", (1, 1), 20),
    _latency("f", "(f) OPT-175B, 8 GPUs, Alpaca", "fig12f_alpaca_opt175b.yaml", (1, 2), 20),
))

FIG2 = Figure("fig2", f"Fig. 2: KV cache usage, OPT-13B, ShareGPT at {FIG2_RATE:g} req/s", (
    Panel("", f"OPT-13B, 1 GPU, ShareGPT, {FIG2_RATE:g} req/s", "kv",
          (Source("fig12a_sharegpt_opt13b.yaml", (f"rates=[{FIG2_RATE:g}]", ORCA_AND_VLLM), thin=False),),
          ylim=(0, 100)),
))

FIG13 = Figure("fig13", "Fig. 13: average number of batched requests, OPT-13B", (
    Panel("a", f"(a) ShareGPT, {FIG13_RATES['sharegpt']:g} req/s", "batched",
          (Source("fig12a_sharegpt_opt13b.yaml", (f"rates=[{FIG13_RATES['sharegpt']:g}]", ORCA_AND_VLLM),
                  thin=False),), (0, 0)),
    Panel("b", f"(b) Alpaca, {FIG13_RATES['alpaca']:g} req/s", "batched",
          (Source("fig12d_alpaca_opt13b.yaml", (f"rates=[{FIG13_RATES['alpaca']:g}]", ORCA_AND_VLLM),
                  thin=False),), (0, 1)),
))

FIG14 = Figure("fig14", "Fig. 14: parallel generation and beam search, OPT-13B, Alpaca", (
    _latency("a", "(a) parallel generation (parallel size = 2)", "fig14_parallel_n2.yaml", (0, 0), 15),
    _latency("b", "(b) parallel generation (parallel size = 4)", "fig14_parallel_n4.yaml", (0, 1), 10),
    _latency("c", "(c) parallel generation (parallel size = 6)", "fig14_parallel_n6.yaml", (0, 2), 6),
), missing=("bottom row (d-f, beam search with widths 2, 4, 6): needs beam search: not on this branch",))

FIG18 = Figure("fig18", "Fig. 18: ablations, OPT-13B", (
    Panel("b", "(b) end-to-end latency with different block sizes", "block_size", (
        Source("fig18b_block_size.yaml", label="ShareGPT"),
        Source("fig18b_block_size.yaml", ("workload.dataset=alpaca-standin", "rates=[30]"), label="Alpaca"),
    ), ylim=(0, 17.5)),
), missing=("(a) attention kernel latency: needs a GPU and the per-block attention cost term: not on this branch",))

FIG19 = Figure("fig19", "Fig. 19: recomputation against swapping, OPT-13B", (
    Panel("b", "(b) end-to-end performance with different block sizes, ShareGPT", "preemption",
          (Source("fig19b_recompute_vs_swap.yaml"),), ylim=(0, 2.5)),
), missing=("(a) microbenchmark of recompute and swap by block size: needs the per-transfer swap cost and the "
            "Fig. 19a cost-model curve: not on this branch",))

FIGURES = {figure.name: figure for figure in (FIG2, FIG12, FIG13, FIG14, FIG18, FIG19)}

# The paper's figures that nothing on this branch can run yet.
NOT_RUNNABLE = {
    "fig15": "needs beam search and the memory_saving summary column: not on this branch",
    "fig16": "needs the shared prefix (workload.prefix_tokens) and its configs: not on this branch",
    "fig17": "needs the chatbot workload and its config: not on this branch",
}


def select(names: list[str]) -> list[Figure]:
    """The figures asked for, in the paper's order; 'all' (or nothing) is every runnable one."""
    if not names or "all" in names:
        return list(FIGURES.values())
    for name in names:
        if name in NOT_RUNNABLE:
            raise SpecError("reproduce", name, f"{NOT_RUNNABLE[name]}; runnable: {', '.join(FIGURES)}, all")
        if name not in FIGURES:
            raise SpecError("reproduce", name, f"unknown figure; valid: {', '.join(FIGURES)}, all")
    return [figure for figure in FIGURES.values() if figure.name in names]


def paper_config(name: str) -> Path:
    """configs/paper/NAME of the clone this package runs from."""
    path = Path(__file__).resolve().parents[2] / "configs" / "paper" / name
    if not path.is_file():
        raise SpecError("reproduce", name, f"{path} is missing; `servesim reproduce` runs the paper configs "
                        "of a clone of the repository (configs/paper/)")
    return path
