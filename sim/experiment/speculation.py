"""An experiment's speculative decoding, checked against what it runs with (docs/speculative-decoding.md): the
draft model found by its name and held to the target's vocabulary and size, and the requests and fleets that
speculation does not serve refused, each with a one-line error naming the key."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from engine.core.spec import ModelSpec
from engine.core.speculative import SpeculativeSpec
from engine.core.system import SystemSpec
from engine.errors import SpecError
from sim.workload.config import WorkloadConfig


def with_drafts(systems: tuple[SystemSpec, ...], target: ModelSpec, source: str,
                load: Callable[[Any, str], ModelSpec], keys: Sequence[str] | None = None) -> tuple[SystemSpec, ...]:
    """The systems with each speculating one's draft model loaded (`load(name, key)`: a shipped model's name or a
    model YAML's path) and checked against the target; `keys`: each system's key (default systems[i])."""
    resolved = []
    for i, system in enumerate(systems):
        spec = system.speculative
        if spec is not None and spec.method == "draft" and spec.draft_model is not None:
            key = f"{keys[i] if keys is not None else f'systems[{i}]'}.speculative.draft_model"
            draft = load(spec.draft_model, key)
            check_draft(draft, target, source, key)
            system = dataclasses.replace(system, speculative=dataclasses.replace(spec, draft=draft))
        resolved.append(system)
    return tuple(resolved)


def proposer_model(spec: SpeculativeSpec, target: ModelSpec) -> ModelSpec | None:
    """The model whose forwards propose: the draft model, or (eagle, mtp) one decoder layer of the target, the head
    those methods add; None for ngram, a lookup on the host."""
    if spec.method == "draft":
        if spec.draft is None:
            raise ValueError(f"draft model {spec.draft_model!r} not loaded: an experiment loads it (with_drafts)")
        return spec.draft
    if spec.method in ("eagle", "mtp"):
        return dataclasses.replace(target, name=f"{target.name} ({spec.method} head: one layer)", num_layers=1)
    return None


def check_draft(draft: ModelSpec, target: ModelSpec, source: str, key: str) -> None:
    """A draft proposes the target's tokens, and pays only when it is cheaper: the same vocabulary, fewer
    parameters."""
    if draft.vocab_size != target.vocab_size:
        raise SpecError(source, key, f"{draft.name} has a vocabulary of {draft.vocab_size} tokens, the target "
                                     f"{target.name} one of {target.vocab_size}; a draft proposes the target's tokens: "
                                     "give a draft model of the same vocabulary")
    if draft.num_params() >= target.num_params():
        raise SpecError(source, key, f"{draft.name} ({draft.num_params() / 1e9:.1f}B parameters) is not smaller than "
                                     f"the target {target.name} ({target.num_params() / 1e9:.1f}B); give a smaller "
                                     "draft model")


def check_requests(systems: tuple[SystemSpec, ...], workload: WorkloadConfig, source: str) -> None:
    """Speculation serves one sequence a request, as vLLM's does (no parallel samples, no beam search)."""
    name = next((s.name for s in systems if s.speculative is not None), None)
    if name is None:
        return
    if workload.n is not None and workload.n > 1:
        raise SpecError(source, "workload.n", f"{workload.n} samples per request: {name} speculates, which serves one "
                                              "sequence a request (give 1, or remove the system's speculative)")
    if workload.beam_width is not None and workload.beam_width > 1:
        raise SpecError(source, "workload.beam_width", f"{workload.beam_width} beams per request: {name} speculates, "
                                                       "and speculative decoding searches no beams (give 1, or remove "
                                                       "the system's speculative)")


def check_trace(systems: tuple[SystemSpec, ...], max_n: int, max_beams: int, trace_name: str, source: str) -> None:
    """check_requests for a replayed trace's own samples and beams (where the workload does not replace them)."""
    name = next((s.name for s in systems if s.speculative is not None), None)
    if name is not None and max(max_n, max_beams) > 1:
        what = f"{max_n} samples" if max_n > 1 else f"{max_beams} beams"
        raise SpecError(source, "workload.trace", f"a request of {trace_name} has {what}: {name} speculates, which "
                                                  "serves one sequence a request (set workload.n: 1 and beam_width: 1)")


def check_prefill_pool(system: SystemSpec, source: str, key: str) -> None:
    """A split fleet speculates on its decode pool alone: its prefill replicas compute prompts and first tokens, where
    nothing is proposed (`key`: the prefill pool's own system)."""
    if system.speculative is not None:
        raise SpecError(source, f"{key}.speculative", "a split fleet's prefill replicas do not speculate: they compute "
                                                      "prompts and first tokens (give speculative to the decode pool's "
                                                      "system, or to the systems run)")
