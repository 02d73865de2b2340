"""Where shipped workload data lives, and how a relative path in a config is resolved."""
from __future__ import annotations

from pathlib import Path

from engine.errors import SpecError

# Package data (sim/workload/data/), found beside this module in any install; its provenance and
# how to rebuild it: traces/README.md in the source tree.
DATA_DIR = Path(__file__).resolve().parent / "data"
SHAREGPT_CSV = DATA_DIR / "sharegpt_opt.csv"
# the same first exchanges without the paper's 2,048-token cut: a longer model keeps what it can hold
SHAREGPT_UNCUT_CSV = DATA_DIR / "sharegpt_opt_uncut.csv"
# Arxiv-Summarization request lengths in Llama-2 tokens, as Vidur (microsoft/vidur) ships them
ARXIV_CSV = DATA_DIR / "arxiv_summarization_llama2.csv"
# ShareGPT conversations as rounds of (query, response) lengths: the chatbot workload (paper Fig. 17)
CHATBOT_CSV = DATA_DIR / "sharegpt_opt_chatbot.csv"


def resolve_data_path(value: str | Path, base_dir: str | Path | None, source: str, key: str) -> Path:
    """An existing file: absolute, or relative to the config's folder, then to the current directory."""
    path = Path(value).expanduser()
    if path.is_absolute():
        candidates = [path]
    else:
        candidates = [Path(base_dir) / path] if base_dir is not None else []
        if not candidates or candidates[0].resolve() != path.resolve():
            candidates.append(path)
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    folder = next((c for c in candidates if c.is_dir()), None)
    if folder is not None:  # "not found" would send the user looking for a file that is there
        raise SpecError(source, key, f"{str(value)!r} is a folder ({folder.resolve()}); give the path of a file")
    tried = ", ".join(str(c.resolve()) for c in candidates)
    raise SpecError(source, key, f"file {str(value)!r} not found (tried {tried})")
