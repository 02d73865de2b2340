"""A cost model in a few words: which device clock, on which GPU, and which engine priced a run.

A cost model's `source` says everything (its efficiencies, held-out errors, what it carries from where); a table a
person reads needs less: `transfer a100-80gb.yaml on h100-sxm x4 + vllm-0.19 (async, CUDA graphs)`. The registry
writes this label on every cost model it builds (CostModel.label); outputs put it in their tables and the source in
a file beside them.
"""
from __future__ import annotations


def device_label(kind: str, profile_name: str | None, hardware: str, tensor_parallel: int,
                 expert_degree: int | None = None) -> str:
    """The device clock: its kind, the profile it reads, the GPU and the tensor-parallel degree it prices, and the
    expert-parallel degree of its data-parallel group where it has one."""
    gpus = f"{hardware} x{tensor_parallel}" if tensor_parallel > 1 else hardware
    if expert_degree is not None:
        gpus += f" (EP {expert_degree})"
    if kind == "roofline":
        return f"roofline on {gpus}"
    return f"{kind} {profile_name} on {gpus}"


def engine_label(host_name: str | None, applied: list[str]) -> str:
    """The engine whose host work it charges, and which of its mechanisms apply here; none: the kind's own."""
    if host_name is None:
        return ""
    return f" + {host_name}" + (f" ({', '.join(applied)})" if applied else "")
