"""Summaries of length data and traces, beside the paper's Fig. 11 means where they apply."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .standin import FIG11_MEANS
from .tokenizer_choice import TOKENIZERS, tokens_label

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Summary:
    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: int

    @classmethod
    def of(cls, values: np.ndarray) -> Summary:
        if len(values) == 0:
            return cls(0, float("nan"), float("nan"), float("nan"), float("nan"), 0)
        p50, p90, p99 = np.percentile(values, PERCENTILES)
        return cls(len(values), float(np.mean(values)), float(p50), float(p90), float(p99), int(np.max(values)))

    def row(self, name: str) -> str:
        return (f"  {name:<7} mean {self.mean:8.2f}   p50 {self.p50:7.0f}   p90 {self.p90:7.0f}   "
                f"p99 {self.p99:7.0f}   max {self.max:6d}")


def paper_reference(label: str) -> tuple[str, tuple[float, float]] | None:
    """Fig. 11's means for ShareGPT- or Alpaca-like data, recognised by name."""
    lowered = label.lower()
    if "chatbot" in lowered or "conversations" in lowered:  # rounds with their history: not Fig. 11's pairs
        return None
    if any(tokens_label(name) and tokens_label(name) in label for name in TOKENIZERS):  # Fig. 11 counts OPT's
        return None
    for name in ("sharegpt", "alpaca"):
        if name in lowered:
            return name, FIG11_MEANS[name]
    return None


def lengths_report(prompt: np.ndarray, output: np.ndarray, label: str, max_seq_len: int | None = None,
                   head: str | None = None) -> str:
    lines = [f"{label}", head or f"  pairs   {len(prompt)}",
             Summary.of(prompt).row("prompt"), Summary.of(output).row("output")]
    if max_seq_len is not None:
        fit = prompt + output < max_seq_len
        lines.append(f"  fit prompt+output < {max_seq_len}: {int(fit.sum())} of {len(fit)}; means "
                     f"{_mean(prompt[fit]):.2f} / {_mean(output[fit]):.2f}")
    reference = paper_reference(label)
    if reference:
        name, (p, o) = reference
        lines.append(f"  paper Fig. 11 ({name}, after the < 2048 filter): mean prompt {p} / output {o}")
    return "\n".join(lines)


def trace_report(trace, max_seq_len: int | None = None) -> str:
    head = (f"  requests {len(trace)}   duration {trace.duration_s:.1f} s   mean rate {trace.mean_rate:.4g} req/s"
            + (f"   parallel samples n: mean {trace.n.mean():.2f}" if len(trace) and (trace.n != 1).any() else "")
            + (f"   beam width: mean {trace.beam_width.mean():.2f}" if len(trace) and trace.has_beams else ""))
    return lengths_report(trace.prompt_len, trace.output_len, trace.source, max_seq_len, head)


def conversations_report(conversations, max_seq_len: int = 2048) -> str:
    """Rounds per conversation, whole turns, and every round once as the chatbot generator cuts it."""
    from .chatbot import ChatbotCuts, every_round

    cuts = ChatbotCuts.for_model(max_seq_len)
    prompt, output = every_round(conversations, cuts)
    lines = [conversations.source,
             f"  conversations {len(conversations)}   rounds {len(conversations.query_len)}",
             Summary.of(conversations.num_rounds).row("rounds"),
             Summary.of(conversations.query_len).row("query"),
             Summary.of(conversations.response_len).row("reply"),
             f"  every round once, cut for max_seq_len {max_seq_len} (prompt = history + query, last {cuts.prompt} "
             f"tokens; output at most {cuts.output}):",
             Summary.of(prompt).row("prompt"), Summary.of(output).row("output")]
    return "\n".join(lines)


def _mean(values: np.ndarray) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def plot_lengths(prompt: np.ndarray, output: np.ndarray, label: str, path: str | Path) -> Path:
    """Two histograms, like Fig. 11, written atomically as PNG."""
    import matplotlib
    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    from engine.atomic import replace_atomic

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, values, name in zip(axes, (prompt, output), ("input (prompt) length", "output length")):
        top = max(int(np.max(values)) if len(values) else 1, 1)
        ax.hist(values, bins=np.linspace(0, top + 1, 60), density=True, color="tab:blue")
        ax.set_xlabel(f"# tokens, {name}")
        ax.set_ylabel("density")
        ax.set_title(f"mean {_mean(values):.2f}", fontsize=9)
    fig.suptitle(label, fontsize=9)
    fig.tight_layout()
    try:
        return replace_atomic(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    finally:
        plt.close(fig)
