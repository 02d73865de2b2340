"""The serving systems under comparison, as policy settings for one control plane.

A system from a user's config (a preset name or a mapping) is engine.specs.loader.system_from_dict.
"""
from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, fields

from engine.core.speculative import SpeculativeSpec
from engine.errors import SpecError

KINDS = ("vllm", "orca", "fastertransformer")
RESERVATIONS = ("oracle", "pow2", "max")
# vLLM's `preemption`: how a running group gives its GPU blocks back when they run out.
#   auto       vLLM's own rule (its default, and the paper's runs): recompute a group of one
#              running sequence (drop its blocks; it waits and re-prefills prompt + output so
#              far), swap a group of several samples to host memory.
#   recompute  recompute every group. vLLM never did this for several samples (the paper-era
#              code has no such option; later vLLM's forced recompute asserts one running
#              sequence); here their diverged samples each re-prefill their own history in
#              their own blocks, no longer sharing the prompt.
#              A group that could not run apart again (re-prefills together over
#              max_num_batched_tokens, or unable to grow alone to their final lengths in the
#              pool, one spare block each) is swapped instead.
#   swap       swap every group, single sequences too.
# The scheduler reads these as engine.core.scheduler.preemption.PreemptionMode (None for auto).
PREEMPTION_MODES = ("auto", "recompute", "swap")
# vLLM's `prefill_policy`: how new prompts share iterations with decodes (docs/vllm-policies.md).
#   mixed     the paper-era code: prompts and decodes in one iteration under max_num_batched_tokens
#   separate  released vLLM v0.2-v0.3: prompt-only iterations whenever prompts can be admitted, else a
#             decode-only one; the budget counts padding (prompts x the longest) and max_paddings
#   chunked   Sarathi-Serve / vLLM >= 0.4 chunked prefill: decodes first, then prompt chunks filling
#             max_num_batched_tokens (vLLM's default for it: CHUNKED_TOKEN_BUDGET)
#   v1        vLLM's V1 engine (0.8+): chunked prefill always on under one token budget, recompute the only
#             preemption, the running requests in the order they were admitted, a block only where a step
#             needs one, and no prompt admitted in a step that preempted (docs/vllm-policies.md)
# One scheduler runs all four (engine/core/scheduler/vllm.py), each a small difference in its schedule().
PREFILL_POLICIES = ("mixed", "separate", "chunked", "v1")
CHUNKED_POLICIES = ("chunked", "v1")  # prompts in chunks under max_num_batched_tokens
# vLLM v0.4.x SchedulerConfig: with enable_chunked_prefill and no max_num_batched_tokens given it picks 512,
# "the values that have the best balance between ITL and TTFT on A100" (engine.specs.loader applies it)
CHUNKED_TOKEN_BUDGET = 512
# vLLM V1's defaults for a server (`vllm serve`'s usage context, EngineArgs.get_batch_defaults): on a GPU of at
# least 70 GiB that is not an A100 (its larger budget cost A100s throughput, vLLM PR 17885), 8192 tokens and 1024
# sequences an iteration; on any other, 2048 and 256 (v1_limits)
V1_LARGE_GPU_GIB = 70
V1_LIMITS_LARGE = (8192, 1024)
V1_LIMITS = (2048, 256)
# vLLM v0.2.x-v0.3.x SchedulerConfig.max_paddings default: a prompt-only batch pads every prompt to the longest
DEFAULT_MAX_PADDINGS = 256

# The keys only vLLM reads (its paged allocator, its schedulers), each with what it is for. The reservation
# systems (Orca, FasterTransformer) hold one reservation per sequence from admission to completion: they never
# preempt, keep no blocks free, cap no tokens and share no blocks, so each of these would mean nothing there.
VLLM_ONLY_KEYS = {
    "max_num_batched_tokens": "vLLM's cap on the tokens of one iteration",
    "preemption": "how vLLM gives a group's blocks back when they run out",
    "watermark": "vLLM's share of blocks kept free when it admits a request",
    "prefix_caching": "vLLM's cache of full blocks shared across requests (paged blocks)",
    "prefill_policy": "vLLM's choice of scheduler (how prompts share iterations with decodes)",
    "speculative": "vLLM's speculative decoding (lookahead slots in its paged blocks)",
}
# The keys only vLLM V1's scheduler reads (prefill_policy: v1)
V1_ONLY_KEYS = {"async_scheduling": "vLLM V1's overlap of the host's scheduling with the GPU's step"}
# The keys only vLLM's prompt-only iterations read (prefill_policy: separate, engine/core/scheduler/
# vllm.py), each with the vLLM releases that had it
SEPARATE_ONLY_KEYS = {"max_paddings": "vLLM v0.2-v0.3's", "delay_factor": "vLLM v0.3's"}


@dataclass(frozen=True)
class SystemSpec:
    """One KV-cache allocation policy and its scheduler.

    vllm: paged blocks allocated on demand, preemption on exhaustion.
    orca: iteration-level batching over one contiguous buddy-allocated reservation per sequence.
    fastertransformer: request-level batches of up to `max_batch_size` max-length reservations.
    """

    name: str
    kind: str
    reservation: str = "max"  # orca: oracle | pow2 | max
    block_size: int = 16
    max_num_batched_tokens: int | None = 2560  # vllm only: the paper-era token cap per iteration
    max_num_seqs: int = 256
    preemption: str = "auto"  # vllm: auto | recompute | swap, see PREEMPTION_MODES above
    watermark: float = 0.01
    max_batch_size: int | None = None  # fastertransformer B; None = as many as memory allows
    # vllm only: automatic prefix caching (vLLM >= 0.4): full KV blocks keyed by their tokens, reused by any
    # later request with the same prefix, kept after their last holder frees them until evicted (LRU)
    prefix_caching: bool = False
    prefill_policy: str = "mixed"  # vllm: mixed | separate | chunked, see PREFILL_POLICIES above
    max_paddings: int = DEFAULT_MAX_PADDINGS  # vllm separate: padding slots a prompt-only batch may hold
    # vllm separate (v0.3's delay_factor): new prompts wait until the oldest waiting one has waited this many
    # times the last prompt run's latency, or nothing runs; 0: no delay
    delay_factor: float = 0.0
    # vllm v1: the host schedules the next step while the GPU runs this one (vLLM's --async-scheduling), so a
    # request that arrives during a busy step joins one step later, and the step's host work overlaps the GPU's
    async_scheduling: bool = False
    # vllm only: speculative decoding (engine.core.speculative, docs/speculative-decoding.md); None: none
    speculative: SpeculativeSpec | None = None

    @property
    def num_lookahead_slots(self) -> int:
        """The tokens a speculating sequence proposes a step, k (0: no speculation)."""
        return self.speculative.num_speculative_tokens if self.speculative is not None else 0

    @property
    def max_seqs_per_batch(self) -> int:
        """The most sequences one iteration runs: FasterTransformer's B, else max_num_seqs."""
        if self.kind == "fastertransformer" and self.max_batch_size is not None:
            return self.max_batch_size
        return self.max_num_seqs

    def validate(self, source: str, key: str, given: Collection[str] | None = None) -> None:
        """Every value in range, and every key `given` read by this system: a key it would ignore (for its kind
        or its prefill policy) is refused with the reason. `given`: the keys a user wrote (a config's mapping,
        its preset's aside); None: the fields that differ from their defaults (a SystemSpec built in code,
        where a default given cannot be told from one left out)."""
        def bad(field: str, message: str) -> SpecError:
            return SpecError(source, f"{key}.{field}", message)

        if self.kind not in KINDS:
            raise bad("kind", f"{self.kind!r} is not one of {list(KINDS)}")
        if self.reservation not in RESERVATIONS:
            raise bad("reservation", f"{self.reservation!r} is not one of {list(RESERVATIONS)}")
        if self.preemption not in PREEMPTION_MODES:
            raise bad("preemption", f"{self.preemption!r} is not one of {list(PREEMPTION_MODES)}")
        if not isinstance(self.block_size, int) or self.block_size <= 0 or self.block_size & (self.block_size - 1):
            raise bad("block_size", f"must be a positive power of two, got {self.block_size!r}")
        if self.max_num_batched_tokens is not None and not _positive_int(self.max_num_batched_tokens):
            raise bad("max_num_batched_tokens", f"must be a positive integer or null (no cap), "
                                                f"got {self.max_num_batched_tokens!r}")
        if not _positive_int(self.max_num_seqs):
            raise bad("max_num_seqs", f"must be a positive integer, got {self.max_num_seqs!r}")
        if isinstance(self.watermark, bool) or not isinstance(self.watermark, (int, float)) \
                or not 0 <= self.watermark < 1:
            raise bad("watermark", f"must be a number in [0, 1), got {self.watermark!r}")
        if not isinstance(self.prefix_caching, bool):
            raise bad("prefix_caching", f"must be true or false, got {self.prefix_caching!r}")
        if self.prefill_policy not in PREFILL_POLICIES:
            raise bad("prefill_policy", f"{self.prefill_policy!r} is not one of {list(PREFILL_POLICIES)}")
        if isinstance(self.max_paddings, bool) or not isinstance(self.max_paddings, int) or self.max_paddings < 0:
            raise bad("max_paddings", f"must be a non-negative integer, got {self.max_paddings!r}")
        if isinstance(self.delay_factor, bool) or not isinstance(self.delay_factor, (int, float)) \
                or not 0 <= self.delay_factor < float("inf"):
            raise bad("delay_factor", f"must be a finite number >= 0, got {self.delay_factor!r}")
        if not isinstance(self.async_scheduling, bool):
            raise bad("async_scheduling", f"must be true or false, got {self.async_scheduling!r}")
        if self.speculative is not None and not isinstance(self.speculative, SpeculativeSpec):
            raise bad("speculative", f"must be a mapping {{method, num_speculative_tokens, draft_model, acceptance}}, "
                                     f"got {self.speculative!r}")
        if self.kind == "vllm" and self.prefill_policy == "v1" and self.preemption == "swap":
            raise bad("preemption", "vLLM V1 has no swap space: it recomputes a preempted request (give "
                                    "recompute or auto, or another prefill_policy)")
        if self.max_batch_size is not None and not _positive_int(self.max_batch_size):
            raise bad("max_batch_size", f"must be a positive integer or null (as many as memory allows), "
                                        f"got {self.max_batch_size!r}")
        for field in self._given(given):
            why = self.unused_reason(field)
            if why is not None:
                raise bad(field, why)
        if self.kind == "vllm" and self.prefill_policy in CHUNKED_POLICIES:
            self._validate_chunked(bad)

    def _given(self, given: Collection[str] | None) -> list[str]:
        """The keys to hold to this system, in the dataclass's order (so the first refused is always the same)."""
        if given is None:
            return [f.name for f in fields(self) if getattr(self, f.name) != f.default]
        return [f.name for f in fields(self) if f.name in given]

    def unused_reason(self, field: str) -> str | None:
        """Why `field` means nothing for this system (its kind, its prefill policy), or None where it is read."""
        if field in VLLM_ONLY_KEYS and self.kind != "vllm":
            what = ("applies only to a vllm system (paged blocks)" if field in ("prefix_caching", "speculative")
                    else f"is {VLLM_ONLY_KEYS[field]}")
            why = ("has its own scheduler only" if field == "prefill_policy"
                   else "holds one reservation per sequence until it finishes")
            return f"{what}; {self.kind} {why} (remove the key)"
        if field in SEPARATE_ONLY_KEYS and (self.kind != "vllm" or self.prefill_policy != "separate"):
            this = (f"this system's prefill_policy is {self.prefill_policy!r}" if self.kind == "vllm"
                    else f"this system is {self.kind}")
            return (f"is {SEPARATE_ONLY_KEYS[field]}, with prefill_policy 'separate'; {this} (remove the key, or "
                    "give a vllm system prefill_policy: separate)")
        if field in V1_ONLY_KEYS and (self.kind != "vllm" or self.prefill_policy != "v1"):
            this = (f"this system's prefill_policy is {self.prefill_policy!r}" if self.kind == "vllm"
                    else f"this system is {self.kind}")
            return (f"is {V1_ONLY_KEYS[field]}; {this} (remove the key, or give a vllm system prefill_policy: v1)")
        if field == "reservation" and self.kind == "vllm":
            return ("is the reservation rule of Orca and FasterTransformer; vllm allocates blocks as its sequences "
                    "grow (remove the key)")
        if field == "max_batch_size" and self.kind != "fastertransformer":
            return (f"is FasterTransformer's batch size B; {self.kind} batches up to max_num_seqs sequences (remove "
                    "the key, or give max_num_seqs)")
        if field == "max_num_seqs" and self.kind == "fastertransformer" and self.max_batch_size is not None:
            return (f"caps FasterTransformer's batch only when max_batch_size is null; this system's max_batch_size "
                    f"is {self.max_batch_size} (give one of the two)")
        return None


    def _validate_chunked(self, bad: Callable[[str, str], SpecError]) -> None:
        """vLLM's SchedulerConfig check: a chunked iteration's budget must hold a decode of every sequence."""
        budget = self.max_num_batched_tokens
        if budget is None:
            default = CHUNKED_TOKEN_BUDGET if self.prefill_policy == "chunked" else V1_LIMITS[0]
            raise bad("max_num_batched_tokens", "chunked prefill needs a token budget per iteration, got null; "
                                                f"give a positive integer (vLLM's default: {default})")
        if budget < self.max_num_seqs:
            raise bad("max_num_batched_tokens", f"{budget} tokens cannot hold a decode of each of max_num_seqs "
                                                f"{self.max_num_seqs} sequences under chunked prefill; give at least "
                                                f"{self.max_num_seqs} (or lower max_num_seqs)")


def v1_limits(memory_gib: float | None, device_names: Collection[str] = ()) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vLLM V1 derives them for a server on this GPU (V1_LIMITS_LARGE's
    comment); a GPU of unknown memory gets the smaller pair, as vLLM's own fallback does."""
    large = memory_gib is not None and memory_gib >= V1_LARGE_GPU_GIB
    if large and not any("a100" in name.lower() for name in device_names):
        return V1_LIMITS_LARGE
    return V1_LIMITS


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


# The paper's five systems (Kwon et al. 2023, section 6.1).
PAPER_SYSTEMS = {
    "fastertransformer": SystemSpec("FasterTransformer", "fastertransformer", reservation="max"),
    "orca-max": SystemSpec("Orca (Max)", "orca", reservation="max"),
    "orca-pow2": SystemSpec("Orca (Pow2)", "orca", reservation="pow2"),
    "orca-oracle": SystemSpec("Orca (Oracle)", "orca", reservation="oracle"),
    "vllm": SystemSpec("vLLM", "vllm"),
}
# vLLM's V1 engine as `vllm serve` runs it (0.8 and later; its defaults as of 0.19): chunked prefill under one token
# budget, prefix caching on, no watermark, recompute on preemption, asynchronous scheduling; its token budget and
# sequence cap are the smaller GPU's here, and a config's GPU sets them as vLLM does (v1_limits) unless given
VLLM_V1 = SystemSpec("vLLM V1", "vllm", max_num_batched_tokens=V1_LIMITS[0], max_num_seqs=V1_LIMITS[1],
                     preemption="recompute", watermark=0.0, prefix_caching=True, prefill_policy="v1",
                     async_scheduling=True)
PRESETS = {**PAPER_SYSTEMS, "vllm-v1": VLLM_V1}
