"""The paper's figures as `servesim reproduce` runs them: each a set of panels, each panel the sweeps
(paper configs, with overrides) behind it.

A panel either simulates (its Sources: paper configs, each one sweep) or draws what a paper config's
cost model predicts without simulating (`cost_model_of`: Figs. 18a and 19a); its kind (a key of
sim/reproduce/panels.py's PANEL_KINDS) says how. The claims that read the figures are in
sim/reproduce/claims.yaml, read by sim/reproduce/claims.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from engine.errors import SpecError

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
        from sim.experiment.fingerprint import SWEEP_KEYS  # pandas and the configs: not on the CLI's start-up path

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
    cost_model_of: str = ""  # a panel drawn from a cost model, not simulated: the paper config whose model it is


@dataclass(frozen=True)
class Figure:
    name: str
    title: str
    panels: tuple[Panel, ...]

    @property
    def sources(self) -> list[tuple[Panel, Source]]:
        """The sweeps behind the figure (a cost-model panel has none)."""
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
    _latency("d", "(d) beam search (beam width = 2)", "fig14_beam_w2.yaml", (1, 0), 15),
    _latency("e", "(e) beam search (beam width = 4)", "fig14_beam_w4.yaml", (1, 1), 10),
    _latency("f", "(f) beam search (beam width = 6)", "fig14_beam_w6.yaml", (1, 2), 6),
))

SHARING_WIDTHS = (2, 4, 6)  # Fig. 15's parallel sizes and beam widths
# Fig. 15 plots vLLM on Fig. 14's Alpaca runs; the paper's text adds ShareGPT's ranges for "the same
# experiments" without their rates. ShareGPT's requests are ~6x Alpaca's (Fig. 11), so it runs at 0.25-1
# req/s, about a sixth of Fig. 14's rates; the saving hardly moves with the rate (a ratio of blocks held).
FIG15_SHAREGPT = ("workload.dataset=sharegpt", "systems=[vllm]", "rates=[0.25, 0.5, 1]")


def _saving(pid: str, caption: str, stem: str, position: tuple[int, int]) -> Panel:
    sources = []
    for width in SHARING_WIDTHS:
        sources += [Source(f"{stem}{width}.yaml", ("systems=[vllm]",), label="Alpaca"),
                    Source(f"{stem}{width}.yaml", FIG15_SHAREGPT, label="ShareGPT")]
    return Panel(pid, caption, "saving", tuple(sources), position)


FIG15 = Figure("fig15", "Fig. 15: memory saving from sharing KV blocks, vLLM, OPT-13B", (
    _saving("a", "(a) parallel sampling", "fig14_parallel_n", (0, 0)),
    _saving("b", "(b) beam search", "fig14_beam_w", (0, 1)),
))

FIG16 = Figure("fig16", "Fig. 16: shared prefix, LLaMA-13B, WMT16 English-to-German translation", (
    _latency("a", "(a) 1-shot prefix prompt (80 tokens)", "fig16a_prefix_1shot.yaml", (0, 0), 40),
    _latency("b", "(b) 5-shot prefix prompt (341 tokens)", "fig16b_prefix_5shot.yaml", (0, 1), 40),
))

FIG17 = Figure("fig17", "Fig. 17: chatbot, OPT-13B, ShareGPT conversations", (
    Panel("", "OPT-13B, 1 GPU, chatbot", "latency", (Source("fig17_chatbot.yaml", (ORCA_AND_VLLM,)),),
          xlim=(0, 0.8), ylim=(0, 1.0)),
))

# Figs. 18a and 19a are microbenchmarks: here the paper configs' cost model (OPT-13B on one A100-40GB)
# predicts them, at each block size, without simulating.
FIG18 = Figure("fig18", "Fig. 18: ablations, OPT-13B", (
    Panel("a", "(a) attention kernel latency, one layer (cost-model prediction)", "kernel", (), (0, 0),
          ylim=(0, 250), cost_model_of="fig18b_block_size.yaml"),
    Panel("b", "(b) end-to-end latency with different block sizes", "block_size", (
        Source("fig18b_block_size.yaml", label="ShareGPT"),
        Source("fig18b_block_size.yaml", ("workload.dataset=alpaca-standin", "rates=[30]"), label="Alpaca"),
    ), (0, 1), ylim=(0, 17.5)),
))

FIG19 = Figure("fig19", "Fig. 19: recomputation against swapping, OPT-13B", (
    Panel("a", "(a) microbenchmark (cost-model prediction)", "preemption_cost", (), (0, 0), ylim=(0, 140),
          cost_model_of="fig19b_recompute_vs_swap.yaml"),
    Panel("b", "(b) end-to-end performance with different block sizes, ShareGPT", "preemption",
          (Source("fig19b_recompute_vs_swap.yaml"),), (0, 1), ylim=(0, 2.5)),
))

FIGURES = {figure.name: figure for figure in (FIG2, FIG12, FIG13, FIG14, FIG15, FIG16, FIG17, FIG18, FIG19)}


def select(names: list[str], argument: str = "reproduce") -> list[Figure]:
    """The figures asked for, in the paper's order; 'all' (or nothing) is every one. `argument` is what
    gave the names, as the user wrote it (the command, or servesim.reproduce's `figures`)."""
    for name in names:  # checked before `all` is: `all fig99` is a typo too
        if name not in FIGURES and name != "all":
            raise SpecError(argument, name, f"unknown figure; valid: {', '.join(FIGURES)}, all")
    if not names or "all" in names:
        return list(FIGURES.values())
    return [figure for figure in FIGURES.values() if figure.name in names]


def paper_config(name: str) -> Path:
    """configs/paper/NAME of the clone this package runs from."""
    path = Path(__file__).resolve().parents[2] / "configs" / "paper" / name
    if not path.is_file():
        raise SpecError("reproduce", name, f"{path} is missing; `servesim reproduce` runs the paper configs "
                        "of a clone of the repository (configs/paper/)")
    return path
