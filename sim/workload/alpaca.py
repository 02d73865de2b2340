"""Alpaca's alpaca_data.json (a list of {instruction, input, output}) as token lengths.

Not shipped: a user points at their copy. Prompt = instruction, plus "\n" and the input when
there is one; output = output. Tokenized with GPT-2's BPE (OPT's), like the ShareGPT file.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from engine.errors import SpecError

SHAPE = 'a JSON list of {"instruction": str, "input": str, "output": str}'


def alpaca_texts(path: str | Path) -> tuple[list[str], list[str]]:
    source = str(path)
    try:
        items = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise SpecError(source, "", "file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SpecError(source, "", f"not valid JSON ({e}); expected {SHAPE}") from None
    except IsADirectoryError:
        raise SpecError(source, "", "is a folder; give the path of an alpaca_data.json file") from None
    except OSError as e:  # a file this user may not read
        raise SpecError(source, "", f"cannot read it: {e.strerror or e}") from None
    if not isinstance(items, list) or not items:
        raise SpecError(source, "top level", f"expected {SHAPE}")
    prompts, outputs = [], []
    for i, item in enumerate(items):
        if not _is_alpaca_item(item):
            raise SpecError(source, f"item {i + 1}", f"expected {SHAPE}, got {str(item)[:80]}")
        extra = item.get("input", "").strip()
        prompts.append(item["instruction"] + ("\n" + extra if extra else ""))
        outputs.append(item["output"])
    return prompts, outputs


def _is_alpaca_item(item) -> bool:
    """instruction and output are required strings; input is an optional string."""
    return (isinstance(item, dict) and isinstance(item.get("instruction"), str)
            and isinstance(item.get("output"), str) and isinstance(item.get("input", ""), str))


def alpaca_lengths(path: str | Path, count_tokens: Callable[[list[str]], list[int]] | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    if count_tokens is None:
        from .tokenizer import (
            count_tokens,  # optional dependency, needed only for this file type
        )
    prompts, outputs = alpaca_texts(path)
    return np.array(count_tokens(prompts), np.int64), np.array(count_tokens(outputs), np.int64)
