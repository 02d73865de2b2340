"""The tiny experiment the command and API tests run: two systems at two rates on 30-s traces, seconds a run."""
from __future__ import annotations

TINY = """\
name: tiny
model: opt-13b
hardware: a100-40gb
kv_cache_gib: 12
workload: {dataset: sharegpt-standin, duration_s: 30}
systems: [vllm, orca-oracle]
rates: [1, 2]
warmup_s: 5
"""


def tiny(**keys: str) -> str:
    """TINY with some top-level keys set to other YAML text, e.g. tiny(rates="[2]"); a new key is appended.

    The other lines stay as written, so a test may still edit them by text."""
    lines = TINY.splitlines()
    for key, value in keys.items():
        line = f"{key}: {value}"
        where = [i for i, old in enumerate(lines) if old.startswith(f"{key}:")]
        if where:
            lines[where[0]] = line
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"
