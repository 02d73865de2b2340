"""ShareGPT-shaped JSON for the builders' tests (sim/workload/sharegpt.py, chatbot_build.py)."""
import json


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
