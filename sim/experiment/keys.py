"""The experiment config's top-level keys, each declared once: its value's type, range or choices, default and the
line the reference page gives it (docs/config.md's key table is made from these: sim/experiment/key_table.py).

A key of a plain type (an integer, a number, a flag) is read and checked here, its one-line error naming the file,
the key and what is valid; a key that holds a name, a list or a section is read by its own parser, this schema
saying only that it is known, whether it is required, its default and what the page says of it. A new key is one
`Key` here and the code that reads its value (`read_keys(...)[name]` in sim/experiment/config.py); then
`python -m sim.experiment.key_table` writes its row into the page.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.errors import SpecError
from engine.specs.checks import choice, known_keys, number

# the types this schema reads itself; any other is a section's or a name's, which its own parser reads
INTEGER, NUMBER, FLAG = "integer", "number", "flag"
# past this many a run would exhaust memory before it reports anything: every replica is a SimPy process with its
# own scheduler
MAX_REPLICAS = 4096


@dataclass(frozen=True)
class Key:
    """One top-level key: `type` is INTEGER, NUMBER, FLAG or what a parser elsewhere reads, in words."""

    name: str
    type: str
    doc: str  # its meaning, as the reference page's key table says it
    default: Any = None  # the value when the key is absent
    default_doc: str = ""  # the page's default where the value alone does not say it
    required: bool = False
    nullable: bool = False  # null means "not given", the default
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple = ()

    @property
    def plain(self) -> bool:
        """Read and checked here, not by a parser of its own."""
        return self.type in (INTEGER, NUMBER, FLAG)

    def read(self, raw: dict, source: str) -> Any:
        """The key's value in the config `raw`, its default where absent: checked if plain (null where that means
        "not given"), else as written, for its own parser."""
        value = raw.get(self.name, self.default)
        if not self.plain or (value is None and (self.nullable or self.name not in raw)):
            return value
        if self.type == FLAG:
            if not isinstance(value, bool):
                raise SpecError(source, self.name, f"must be true or false, got {value!r}")
            return value
        value = number(value, source, self.name, low=self.low, high=self.high, low_open=self.low_open,
                       whole=self.type == INTEGER)
        return choice(value, source, self.name, self.choices) if self.choices else value

    @property
    def default_text(self) -> str:
        """The page's default cell."""
        if self.required:
            return "required"
        if self.default_doc:
            return self.default_doc
        if self.default is None or isinstance(self.default, bool):
            return {None: "null", True: "true", False: "false"}[self.default]
        return str(self.default)


EXPERIMENT_KEYS = (
    Key("name", "a plain folder name", default_doc="the file's stem",
        doc="label; output goes to `results/<name>/`, so a plain folder name (no `/`, not `.` or `..`)"),
    Key("model", "a shipped model's name or a YAML path", required=True,
        doc="a shipped model's name (`opt-125m` to `opt-175b`, `llama-7b`, `llama-13b`, `llama-2-7b`, `llama-2-13b`, "
            "`llama-2-70b`, `llama-3-8b`, `llama-3-70b`, `llama-3.1-8b`, `llama-3.1-70b`, `mistral-7b`, "
            "`codellama-34b`, `qwen2.5-7b`, `qwen2.5-72b`, `internlm-20b`, `phi-2`, `mixtral-8x7b`, `qwen3-32b`, "
            "`qwen3-30b-a3b`; `opt-tiny`, `llama-tiny`, `qwen2-tiny`, `phi-tiny`, `mixtral-tiny`, `qwen3-tiny` and "
            "`qwen3-moe-tiny` for tests: [Models](models.md) lists them with their sources) or a YAML path"),
    Key("max_model_len", "an integer from 2 to the model's max_seq_len", default_doc="the model's `max_seq_len`",
        doc="the server's cap on prompt + output tokens, as vLLM's `--max-model-len`: an integer from 2 to the "
            "model's `max_seq_len`, which it replaces wherever a request's length is checked (a GPU too small for a "
            "model's whole context serves it so: the KV pool must hold one request of this length)"),
    Key("hardware", "a shipped GPU's name or a YAML path", required=True,
        doc="a shipped GPU's name (`a100-40gb`, `a100-80gb`, `h100-sxm`, `h100-pcie`, `h200`, `b200`, `gh200`, "
            "`l40s`, `a40`, `a10g`, `a10`, `l4`, `mi300x`, `rtx-4090`, `rtx-pro-6000`, `rtx-pro-6000-server`: the "
            "sheets in `calibrate/hardware_specs/`, figures in [transfer.md](transfer.md#the-new-gpus)) or a YAML "
            "path"),
    Key("tensor_parallel", INTEGER, default=1, low=1,
        doc="GPUs per replica (Megatron-style: work ÷ tp, two all-reduces per layer); must divide the model's heads "
            "and KV heads"),
    Key("dtype_bytes", INTEGER, low=1, choices=(1, 2, 4), default_doc="2",
        doc="bytes per weight, KV and activation element alike: 1, 2 or 4 (every matmul at the sheet's 16-bit rate); "
            "not with `precision`"),
    Key("precision", "a mapping {weights, kv_cache}", default_doc="fp16, fp16",
        doc="`{weights, kv_cache}`: the weights' format (`fp16`, `bf16`, `fp8`, `int8`, `int4`: 2, 2, 1, 1, 0.5 bytes "
            "per decoder matmul weight; the embedding and LM head stay 16-bit) and the KV cache's (`fp16`, `bf16`, "
            "`fp8`: 2, 2, 1 bytes); activations stay 16-bit. FP8 weights run W8A8 where the sheet gives a "
            "`peak_flops_fp8` (a dense model's GEMMs as measured FP8 GEMMs price them, a mixture of experts' at that "
            "rate), else weight-only at `peak_flops`; int8/int4 are weight-only ([Precision](precision.md)). The "
            "roofline prices any format; a `profile` or `transfer` cost model, and `servesim validate`'s engine, "
            "16-bit ones only; not with `dtype_bytes`"),
    Key("kv_cache_gib", NUMBER, low=0, low_open=True, nullable=True,
        doc="KV cache per GPU in GiB, > 0 and fitting beside the weights; null uses the paper-era rule `0.95 × memory "
            "− weights − peak activations − 1 GiB`"),
    Key("swap_space_gib", NUMBER, default=20, low=0,
        doc="CPU swap space per GPU in GiB (>= 0), for vLLM's swapping"),
    Key("cost_model", "roofline, a profile path or a mapping",
        default_doc="none: the GPU's device clock (its own measured profile where servesim ships one: "
                    "`rtx-pro-6000-server`, `rtx-4090`, `a100-80gb`; else `a100-80gb.yaml` carried to it; the roofline "
                    "for weights or a KV cache below 16 bits) with vLLM 0.19's engine model (`host: vllm-0.19`): "
                    "`{kind: transfer, path: ..., host: vllm-0.19}` ([the engine users run today](vllm-v1.md))",
        doc="`roofline`; a profile path; `{kind: roofline, compute_efficiency, bandwidth_efficiency, pcie_efficiency, "
            "overhead_s, ridge_efficiency, block_read_overhead_tokens, swap_copy_latency_s}` (efficiencies in (0, 1], "
            "the rest >= 0); `{kind: profile, path}`; or `{kind: transfer, path}` with an optional `measured_on` and "
            "`block_read_overhead_tokens` (a paged kernel's cost per KV block over the attention the profile prices, "
            "in tokens' K/V: [the paged kernel's factor](attention.md#the-paged-kernels-factor)) (see [Cost "
            "models](concepts/cost-models.md)); any mapping may add `host`: a shipped host model (`vllm-0.19`, "
            "`vllm-a100-2024-01`, `vllm-a100-2024-05`, `vllm-v1-2026`, `servesim-cpu-engine`) or a host model YAML's "
            "path, whose host time is charged instead of the kind's own (see [Host models](host-models.md)), and "
            "`cuda_graphs: false` where that engine model replays CUDA graphs, to run its iterations eager ([an "
            "engine's mechanisms](host-models.md#an-engines-mechanisms-beyond-its-host-terms))"),
    Key("workload", "the workload section, a mapping", required=True,
        doc="the workload section (keys below); required, `workload: {}` takes every default"),
    Key("systems", "a list of presets or system mappings", default_doc="the paper's five presets",
        doc="a list of presets (`fastertransformer`, `orca-max`, `orca-pow2`, `orca-oracle`, `vllm`, and `vllm-v1`: "
            "vLLM's V1 engine as a server runs it, [vLLM's prefill policies](vllm-policies.md)) or mappings: `preset` "
            "plus overrides, or `name` and `kind` plus any of `reservation`, `block_size`, `max_num_batched_tokens`, "
            "`max_num_seqs`, `preemption`, `watermark`, `max_batch_size`, `prefix_caching`, `prefill_policy`, "
            "`max_paddings`, `delay_factor`, `async_scheduling`, `speculative` that the system reads (the system keys "
            "below)"),
    Key("rates", "a list of request rates in req/s", required=True,
        doc="request rates in req/s, each > 0 (for a replay: the mean rate to rescale the trace to), or `inf` "
            "(`.inf`): every request at 0 s, vLLM's `--request-rate inf`, which needs `workload.num_requests` (a "
            "replay: its trace's requests) and, with no gate, `warmup_s: 0`; a run at `inf` serves every request, "
            "whatever `max_time_factor` ([vLLM's benchmark client](concepts/workloads.md#vllms-benchmark-client))"),
    Key("concurrencies", "a list of integers >= 1", default_doc="none (no gate)",
        doc="a sweep of the client's gate beside `rates` (vLLM's `--max-concurrency`): a list of integers >= 1, one "
            "run per rate and concurrency, each with `workload.max_concurrency` at that value; not with "
            "`workload.max_concurrency`, nor with `split` ([vLLM's benchmark "
            "client](concepts/workloads.md#vllms-benchmark-client))"),
    Key("seeds", "a list of integers >= 0", default=[0],
        doc="one run per seed; at one seed every system gets the same requests"),
    Key("warmup_s", NUMBER, default=60.0, low=0, default_doc="60",
        doc="arrivals before this time are left out of the latency metrics (the paper: 60 s); must be less than "
            "`workload.duration_s` (a replay: at most its last arrival); behind a client's gate, requests sent before "
            "it"),
    # below 1 the run stops before the last arrival, and unfinished requests would finish before they arrive
    Key("max_time_factor", NUMBER, default=2.0, low=1,
        doc="stop a run at horizon = this × max(trace span, `warmup_s`, 1 s), >= 1; unfinished requests count with "
            "finish = horizon"),
    Key("replicas", INTEGER, default=1, low=1, high=MAX_REPLICAS,
        doc="identical replicas behind the router, 1 to 4096"),
    Key("router", "a router's kind or a mapping {kind, ...}", default="round_robin",
        doc="`round_robin` (request i to replica i mod n), `least_outstanding` (fewest admitted, unfinished "
            "requests), `power_of_two` (the fewer outstanding of two distinct replicas drawn at random, from a child "
            "of the run's seeded generator) or `cache_aware` (SGLang's router's rule: the replica whose prefix cache "
            "holds most of the prompt's leading blocks, unless the load is imbalanced; needs `prefix_caching: true` "
            "on every system it routes to, however many replicas: a split fleet's prefill pool's); or a mapping "
            "`{kind, cache_threshold, balance_abs_threshold, balance_rel_threshold}`, the three thresholds "
            "cache_aware's only: a match rate in [0, 1] (0.5), an integer >= 0 (32) and a number >= 1 (1.0001), "
            "sgl-router's defaults. Ties go to the lower index ([Routing](routing.md))"),
    Key("expert_parallel", "true or false", default=False,
        doc="`true`: the `replicas` are one data-parallel group serving a mixture of experts with expert parallelism "
            "(vLLM's `--enable-expert-parallel`): each GPU holds `num_experts` / (replicas x `tensor_parallel`) whole "
            "experts, reads those of them every rank's tokens are routed to, pays every MoE layer's all-gather and "
            "reduce-scatter of the ranks' tokens, and keeps its own KV pool beside its share of the weights; priced "
            "at equal load across the ranks ([Models](models.md#expert-parallelism)). Only for a mixture of experts, "
            "where replicas x `tensor_parallel` divides `num_experts`; not with `split`, a `profile` cost model or "
            "`servesim capacity`"),
    Key("split", "a mapping {prefill, decode, kv_link, on_decode_full}", default_doc="none",
        doc="a prefill pool and a decode pool instead of `replicas` ([Disaggregated serving](disaggregated.md)): "
            "`{prefill, decode, kv_link, on_decode_full}`; each pool `{replicas, hardware, tensor_parallel, "
            "kv_cache_gib, system}`, `replicas` required (1 to 4096), the rest the experiment's (system: the run's; "
            "the decode pool's without prefix caching, the prefill pool's without `speculative`, which its own system "
            "may not name; a pool's own system, and every system run on a split, of kind `vllm`); `kv_link` `nvlink`, "
            "`pcie`, `infiniband`, `{kind: custom, bytes_per_s, latency_s}` or `{kind: measured, table, placement}` "
            "([Moving KV between GPUs](kv-link.md)), read against the prefill pool's GPU and refused if one token's "
            "KV takes longer than a day to cross it; `on_decode_full` `hold` (the request waits with its KV held on "
            "the prefill replica) or `recompute` (its KV is dropped and it is computed again on the least loaded "
            "decode replica); no `replicas`, `breakdown` or `trace_events` beside it; one sequence per request (n and "
            "beam_width 1)"),
    Key("breakdown", FLAG, default=False,
        doc="`true`: each iteration's device time by kernel kind and host time by term, as columns of the iterations "
            "file and shares in `summary.csv` ([outputs](outputs.md#where-the-time-goes)); every iteration is then "
            "priced on its own event (no fast-forward, a fleet served in one process): the same records, slower "
            "(`servesim run --breakdown`)"),
    Key("trace_events", FLAG, default=False,
        doc="`true`: also each run's `trace.json.gz`, a Chrome/Perfetto trace (a track per replica, and per request "
            "up to 1000: [where the time goes](outputs.md#where-the-time-goes)); implies `breakdown` (`servesim run "
            "--trace-events`)"),
    Key("vllm_bench", FLAG, default=False,
        doc="`true`: also each run's `vllm_bench.json`, the result `vllm bench serve --save-result --save-detailed` "
            "writes, in its field names and units ([vLLM's benchmark figures](vllm-bench.md); `servesim run "
            "--vllm-bench`)"),
    Key("goodput", "a mapping of objectives in ms", default_doc="none",
        doc="service level objectives for `vllm_bench.json`'s `request_goodput`, as vLLM's `--goodput`: a mapping of "
            "`ttft`, `tpot` and `e2el` (any of them) to milliseconds, each a finite number >= 0, e.g. `{ttft: 500, "
            "tpot: 50}`; implies `vllm_bench` (`servesim run --goodput ttft:500 tpot:50`)"),
)
KEYS = {key.name: key for key in EXPERIMENT_KEYS}


def check_top_level(raw: dict, source: str) -> None:
    """Every key known and every required one there, before any is read."""
    known_keys(raw, sorted(KEYS), source)
    for key in EXPERIMENT_KEYS:
        if key.required and key.name not in raw:
            raise SpecError(source, key.name, f"missing required key ({key.type})")


def read_keys(raw: dict, source: str) -> dict[str, Any]:
    """Every key's value by name (Key.read): the plain ones checked, the others as written or their default."""
    check_top_level(raw, source)
    return {key.name: key.read(raw, source) for key in EXPERIMENT_KEYS}
