"""The `workload:` section of an experiment YAML, validated, and the Trace it builds.

    workload:
      dataset: sharegpt      # sharegpt | arxiv-summarization | sharegpt-fig11-standin | sharegpt-standin
                             # | alpaca-standin | wmt16-en-de-standin | lengths CSV | alpaca_data.json
                             # | chatbot | a conversation CSV (rounds of conversations: chatbot.py)
      length_filter: paper   # paper: sharegpt as cut when built (prompt <= 1024, prompt + output < 2048)
                             # | model: its uncut build, so the model's max_seq_len alone decides (the
                             # other datasets are cut by the model alone either way)
      tokenizer: null        # sharegpt and chatbot: whose token counts, opt | llama-3 | mistral | qwen; null: the
                             # model's own where they ship, else opt (tokenizer_choice.py)
      arrival: poisson       # poisson (10 ms quanta) | exponential | gamma | constant
      cv: 1.0                # gamma only: coefficient of variation of the gaps
      burstiness: null       # vLLM's --burstiness B: gamma gaps of shape B (cv = 1/sqrt(B)); implies gamma; not with cv
      duration_s: 3600
      num_requests: null     # vLLM's --num-prompts: this many arrivals, not duration_s of them (rate inf needs it)
      max_concurrency: null  # vLLM's --max-concurrency: a request is sent only while fewer are in flight
      n: 1                   # parallel samples per request
      new_conversation_prob: 0.1   # chatbot only: an arrival starts a new conversation with this probability
      prefix_tokens: 0       # a shared prefix (few-shot examples) at the start of every prompt, replayed ones too
      system_prompt: null    # {tokens: 1024, count: 4}: every prompt starts with one of `count` system prompts of
                             # `tokens` tokens (picked uniformly), before a user turn drawn from the dataset (or
                             # a replayed prompt)
      beam_width: 1          # beams per request (1: no beam search); a request has n > 1 or beam_width > 1
      beam_continue: 0.93    # simulated beam search: P(a surviving candidate continues its own beam), sim/core/beams.py
      trace: null            # recorded trace to replay (dataset, arrival, cv, burstiness, duration_s, num_requests and
                             # new_conversation_prob, which shape a generated workload, then stand aside)
      time_scale: null       # replay only: k x the recorded rate; null + a rate: scale to that mean rate
      window_s: null         # replay only: [start, end) on the recorded clock

Relative paths are looked up beside the config file, then in the current directory.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from engine.core.spec import ModelSpec
from engine.errors import SpecError
from engine.specs.checks import choice, is_number, known_keys, number, optional, positive, positive_int
from engine.specs.paths import Shipped, resolve_path

from .arrivals import ARRIVALS, first_arrivals
from .beams import DEFAULT_BEAM_CONTINUE
from .chatbot import DEFAULT_NEW_CONVERSATION_PROB, chatbot_label, chatbot_requests
from .conversations import CONVERSATION_NAMES, is_conversation_dataset, load_conversations
from .lengths import DATASET_NAMES, LENGTH_FILTERS, PAPER_CUT_ONLY, load_lengths
from .recorded import Replay, load_recorded
from .tokenizer_choice import COUNTED_DATASETS, OPT, TOKENIZERS, model_tokenizer
from .tokens import system_prompt_segments
from .trace import Trace

SECTION = "workload"
# The authors' Poisson generator draws one count per 10 ms of arrivals, so the duration sets its
# memory: a day is 8.6 M draws; longer is a recorded trace's job (workload.trace).
MAX_DURATION_S = 86_400.0
BEAM_LABEL = re.compile(r"; beam search, width [0-9/]+ \(simulated parents: [^)]*\)")
# Gamma gaps have shape 1/cv^2: outside this range the draws under- or overflow and lose their mean.
CV_RANGE = (0.001, 10.0)
# the same range as a shape (vLLM's burstiness): 1/cv^2
BURSTINESS_RANGE = (0.01, 1e6)
NAMES = (*DATASET_NAMES, *CONVERSATION_NAMES)


@dataclass(frozen=True)
class SystemPrompt:
    """workload.system_prompt: `count` distinct system prompts of `tokens` tokens; each request starts with one."""

    tokens: int
    count: int = 1


def _system_prompt(raw, source: str, values: dict) -> SystemPrompt | None:
    key = f"{SECTION}.system_prompt"
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SpecError(source, key, f"must be a mapping {{tokens: N, count: K}}, got {raw!r}")
    known_keys(raw, ["count", "tokens"], source, key)
    if "tokens" not in raw:
        raise SpecError(source, f"{key}.tokens", "missing: the system prompt's length in tokens")
    prompt = SystemPrompt(positive_int(raw["tokens"], source, f"{key}.tokens"),
                          positive_int(raw.get("count", 1), source, f"{key}.count"))
    if values["trace"] is None and _is_conversations(values["dataset"]):
        raise SpecError(source, key, "applies to a length dataset, not to a conversation dataset, whose prompt is "
                        "the conversation so far")
    if values["prefix_tokens"]:
        raise SpecError(source, key, "and workload.prefix_tokens both put text before every prompt; use one")
    return prompt


@dataclass(frozen=True)
class WorkloadConfig:
    dataset: str = "sharegpt"        # a dataset name, or an absolute path once resolved
    length_filter: str = "paper"     # which build of sharegpt is read (lengths.LENGTH_FILTERS)
    tokenizer: str = OPT             # whose counts of sharegpt and chatbot are read (tokenizer_choice.TOKENIZERS)
    arrival: str = "poisson"
    cv: float = 1.0
    burstiness: float | None = None  # vLLM's gamma shape; None: the gaps' shape is 1/cv^2
    duration_s: float = 3600.0
    num_requests: int | None = None  # this many arrivals (vLLM's --num-prompts); None: duration_s of them
    max_concurrency: int | None = None  # the client's gate (sim/core/client_gate.py); None: every request sent
    n: int | None = None             # None: 1, or the recorded trace's own n column
    new_conversation_prob: float = DEFAULT_NEW_CONVERSATION_PROB   # a conversation dataset only
    prefix_tokens: int = 0           # tokens of one shared prefix put before every prompt
    system_prompt: SystemPrompt | None = None  # system prompts put before every prompt (one of several)
    beam_width: int | None = None    # None: 1, or the recorded trace's own beam_width column
    beam_continue: float = DEFAULT_BEAM_CONTINUE
    trace: Path | None = None        # absolute path once resolved
    time_scale: float | None = None
    window_s: tuple[float, float] | None = None
    source: str = "config"           # the file this came from, for error messages

    @property
    def is_replay(self) -> bool:
        return self.trace is not None

    @classmethod
    def from_dict(cls, raw: dict | None, source: str = "config", base_dir: str | Path | None = None,
                  model: ModelSpec | None = None) -> WorkloadConfig:
        """The checked section; `model`, the model served, chooses whose token counts are read unless
        workload.tokenizer does (none: OPT's)."""
        raw = {} if raw is None else raw
        if not isinstance(raw, dict):
            raise SpecError(source, SECTION, f"must be a mapping of keys to values, got {type(raw).__name__}")
        valid = [f.name for f in fields(cls) if f.name != "source"]
        known_keys(raw, valid, source, SECTION)
        values = {"source": source}
        values["trace"] = _path(raw, "trace", source, base_dir)
        values.update(_replay_options(raw, source, values["trace"] is not None))
        values["arrival"] = choice(raw.get("arrival", cls.arrival), source, f"{SECTION}.arrival", list(ARRIVALS))
        values["cv"] = number(raw.get("cv", cls.cv), source, f"{SECTION}.cv", low=CV_RANGE[0], high=CV_RANGE[1])
        values.update(_burstiness(raw, source, values["trace"] is not None))
        duration = raw.get("duration_s")  # null: not given (`--set workload.duration_s=null` makes way for a count)
        values["duration_s"] = number(cls.duration_s if duration is None else duration, source,
                                      f"{SECTION}.duration_s", low=0, low_open=True, high=MAX_DURATION_S)
        values["num_requests"] = _num_requests(raw, source, values["trace"] is not None)
        values["max_concurrency"] = optional(positive_int, raw.get("max_concurrency"), source,
                                             f"{SECTION}.max_concurrency")
        n = raw.get("n")
        values["n"] = None if n is None else positive_int(n, source, f"{SECTION}.n")
        values["prefix_tokens"] = number(raw.get("prefix_tokens", cls.prefix_tokens), source,
                                         f"{SECTION}.prefix_tokens", low=0, whole=True)
        width = raw.get("beam_width")
        values["beam_width"] = None if width is None else positive_int(width, source, f"{SECTION}.beam_width")
        if (values["n"] or 1) > 1 and (values["beam_width"] or 1) > 1:
            raise SpecError(source, f"{SECTION}.beam_width", (
                f"{values['beam_width']} beams and n={values['n']} samples per request: a request samples n "
                "sequences or searches beam_width beams, not both; set one of them to 1"))
        values["beam_continue"] = number(raw.get("beam_continue", cls.beam_continue), source,
                                         f"{SECTION}.beam_continue", low=0, high=1)
        _check_modes(raw, source, values)
        if values["trace"] is None:
            values["dataset"] = _dataset(raw.get("dataset", cls.dataset), source, base_dir)
        values.update(_chatbot_options(raw, source, values.get("dataset")))
        values.update(_length_filter(raw, source, values.get("dataset")))
        values["tokenizer"] = _tokenizer(raw, source, values.get("dataset"), model)
        values["system_prompt"] = _system_prompt(raw.get("system_prompt"), source, values)
        if values["prefix_tokens"] and values.get("dataset") is not None and _is_conversations(values["dataset"]):
            raise SpecError(source, f"{SECTION}.prefix_tokens", "applies to a length dataset, not to a conversation "
                            "dataset, whose prompt is the conversation so far")
        return cls(**values)

    def all_at_once(self, rate: float | None) -> bool:
        """Every request arrives at 0 s: an infinite rate (vLLM's --request-rate inf), which a replay's time_scale
        sets aside."""
        return rate == math.inf and self.time_scale is None

    @property
    def is_chatbot(self) -> bool:
        return not self.is_replay and _is_conversations(self.dataset)


def build_trace(cfg: WorkloadConfig, rate: float | None, max_seq_len: int,
                rng: np.random.Generator) -> Trace:
    """The run's requests: a recorded trace replayed, or arrivals and lengths drawn from `rng`.

    Draw order is fixed (arrivals, then lengths) so the same seed gives the same trace.
    """
    if cfg.is_replay:
        return _replay(cfg, rate, max_seq_len, rng)
    if rate is None:
        raise SpecError(cfg.source, SECTION, "a generated workload needs a request rate; only a recorded "
                        "trace (workload.trace) can run without one")
    arrival_s = _arrivals(cfg, rate, rng)
    if cfg.is_chatbot:
        conversations = load_conversations(cfg.dataset, cfg.tokenizer)
        chat = chatbot_requests(conversations, len(arrival_s), cfg.new_conversation_prob, max_seq_len, rng)
        prompt, output, segments = chat.prompt_len, chat.output_len, chat.segments
        source = chatbot_label(conversations.source, cfg.new_conversation_prob, chat.cuts)
    else:
        lengths = load_lengths(cfg.dataset, cfg.length_filter, cfg.tokenizer)
        # the prefix goes before each drawn prompt, and a request must fit with it (prefix + input + output)
        system = cfg.system_prompt.tokens if cfg.system_prompt is not None else 0
        prompt, output = lengths.sample(len(arrival_s), max_seq_len - cfg.prefix_tokens - system, rng)
        source, segments = lengths.source, None
        if cfg.system_prompt is not None:  # drawn after the lengths: a seed's lengths stay those without it
            picks = rng.integers(0, cfg.system_prompt.count, len(arrival_s))
            prompt = prompt + system
            segments = system_prompt_segments(picks, system, prompt, output)
            source += (f"; a system prompt of {system} tokens before every prompt, one of "
                       f"{cfg.system_prompt.count} (uniformly)")
    label = f"{source}; {_arrivals_label(cfg, rate)}"
    if cfg.prefix_tokens:
        label += f"; a shared prefix of {cfg.prefix_tokens} tokens before every prompt"
    # a count's arrivals cover the time up to the last of them (none for every request at once)
    duration = cfg.duration_s if cfg.num_requests is None else None
    trace = Trace(arrival_s, prompt + cfg.prefix_tokens, output, cfg.n or 1, label, duration,
                  beam_width=cfg.beam_width or 1, prefix_len=cfg.prefix_tokens, segments=segments)
    return with_beam_label(trace, cfg)


def _arrivals(cfg: WorkloadConfig, rate: float, rng: np.random.Generator) -> np.ndarray:
    """When each request arrives: duration_s of the arrival process, or its first num_requests; at an infinite
    rate every request at 0 s (vLLM's --request-rate inf), which only a count can bound."""
    if rate == math.inf:
        if cfg.num_requests is None:
            raise SpecError(cfg.source, f"{SECTION}.num_requests", INF_NEEDS_A_COUNT)
        return np.zeros(cfg.num_requests)
    options = {"cv": cfg.cv, "shape": cfg.burstiness} if cfg.arrival == "gamma" else {}
    if cfg.num_requests is not None:
        return first_arrivals(cfg.arrival, rate, cfg.num_requests, rng, **options)
    return ARRIVALS[cfg.arrival](rate, cfg.duration_s, rng, **options)


def _arrivals_label(cfg: WorkloadConfig, rate: float) -> str:
    if rate == math.inf:
        return f"all {cfg.num_requests} requests at 0 s (rate inf)"
    shape = "" if cfg.arrival != "gamma" else \
        f" cv={cfg.cv:g}" if cfg.burstiness is None else f" burstiness={cfg.burstiness:g}"
    span = f"for {cfg.duration_s:g} s" if cfg.num_requests is None else f"{cfg.num_requests} requests"
    return f"{cfg.arrival}{shape} arrivals at {rate:g} req/s {span}"


def with_beam_label(trace: Trace, cfg: WorkloadConfig) -> Trace:
    """A trace of beam searches says so, and how the simulator chooses the beams' parents."""
    if not trace.has_beams:
        return trace
    widths = "/".join(str(w) for w in np.unique(trace.beam_width[trace.beam_width > 1]))
    source = BEAM_LABEL.sub("", trace.source)  # a trace file written from a run says it already: once
    return trace.with_source(f"{source}; beam search, width {widths} (simulated parents: a candidate "
                             f"continues its own beam with probability beam_continue={cfg.beam_continue:g})")


def _replay(cfg: WorkloadConfig, rate: float | None, max_seq_len: int, rng: np.random.Generator) -> Trace:
    trace = replayed(cfg, recorded(cfg, max_seq_len), rate)
    return with_beam_label(_with_system_prompts(trace, cfg.system_prompt, rng), cfg)


def added_tokens(cfg: WorkloadConfig) -> int:
    """Tokens the config puts before every prompt: prefix_tokens, or a system prompt (one of the two)."""
    return cfg.prefix_tokens + (cfg.system_prompt.tokens if cfg.system_prompt is not None else 0)


def recorded(cfg: WorkloadConfig, max_seq_len: int) -> Trace:
    """The recorded trace cut to its window, less the requests the model cannot serve with the config's
    prefix_tokens before each prompt (and room for its system prompt); never empty."""
    replay = load_recorded(cfg.trace, window_s=cfg.window_s, max_seq_len=max_seq_len - added_tokens(cfg))
    if len(replay.trace) == 0:
        raise _nothing_to_replay(cfg, replay, max_seq_len)
    if cfg.system_prompt is not None and replay.trace.prefix_len:
        # a system prompt before the trace's own shared prefix would leave no prefix every prompt shares
        raise SpecError(cfg.source, f"{SECTION}.system_prompt", (
            f"{Path(cfg.trace).name}'s prompts start with a shared prefix of {replay.trace.prefix_len} tokens "
            "(its '# prefix_tokens:' line); put text before them with workload.prefix_tokens, not a system prompt"))
    return _with_shared_prefix(replay.trace, cfg.prefix_tokens)


def _with_shared_prefix(trace: Trace, tokens: int) -> Trace:
    """`tokens` of one shared prefix before every replayed prompt: with a prefix the trace has of its own (a
    '# prefix_tokens:' line), every prompt's first tokens are still one prefix, longer by `tokens`."""
    if not tokens:
        return trace
    return Trace(trace.arrival_s, trace.prompt_len + tokens, trace.output_len, trace.n,
                 f"{trace.source}; a shared prefix of {tokens} tokens before every prompt", trace.duration_s,
                 prefix_len=trace.prefix_len + tokens, beam_width=trace.beam_width)


def _with_system_prompts(trace: Trace, prompts: SystemPrompt | None, rng: np.random.Generator) -> Trace:
    """One of `prompts.count` system prompts before every replayed prompt, each request's drawn from the run's
    Generator (a seed picks the same ones), as a generated workload's are; room was left by recorded()."""
    if prompts is None:
        return trace
    picks = rng.integers(0, prompts.count, len(trace))
    prompt = trace.prompt_len + prompts.tokens
    return Trace(trace.arrival_s, prompt, trace.output_len, trace.n,
                 f"{trace.source}; a system prompt of {prompts.tokens} tokens before every prompt, one of "
                 f"{prompts.count} (uniformly)", trace.duration_s, beam_width=trace.beam_width,
                 segments=system_prompt_segments(picks, prompts.tokens, prompt, trace.output_len))


def _nothing_to_replay(cfg: WorkloadConfig, replay: Replay, max_seq_len: int) -> SpecError:
    name = Path(cfg.trace).name
    if cfg.window_s is not None and replay.num_too_long == 0:
        start, end = cfg.window_s
        return SpecError(cfg.source, f"{SECTION}.window_s", f"no request of {name} arrives in [{start:g}, {end:g}) s "
                         "of its recorded clock; choose a window inside the trace")
    where = " in the window" if cfg.window_s is not None else ""
    if replay.num_too_long == 0:
        return SpecError(cfg.source, f"{SECTION}.trace", f"{name} has no request with tokens to serve{where}")
    added = added_tokens(cfg)
    room = (f"{max_seq_len - added} tokens, the model's max_seq_len {max_seq_len} less the {added} put before "
            "every prompt (workload.prefix_tokens, workload.system_prompt)" if added
            else f"{max_seq_len} tokens, the model's max_seq_len")
    return SpecError(cfg.source, f"{SECTION}.trace", (
        f"every request of {name}{where} ({replay.num_too_long}) has prompt + output >= {room}: none can be "
        "served"))


def replayed(cfg: WorkloadConfig, trace: Trace, rate: float | None) -> Trace:
    """A recorded trace on the clock it is replayed at: time_scale x its rate, or rescaled to `rate`."""
    if cfg.time_scale is not None:
        if cfg.time_scale != 1:
            trace = _scaled(cfg, trace, cfg.time_scale, f"{SECTION}.time_scale").with_source(
                f"{trace.source}; replayed at {cfg.time_scale:g}x the recorded rate")
    elif rate is not None:
        if trace.duration_s <= 0:  # every arrival at one instant: a burst has no rate to rescale
            raise SpecError(cfg.source, f"{SECTION}.trace", (
                f"every arrival of {Path(cfg.trace).name} is at {trace.arrival_s[0]:g} s, so it has no "
                f"recorded rate to rescale to {rate:g} req/s; set workload.time_scale: 1 to replay it as recorded"))
        factor = rate / trace.mean_rate
        trace = _scaled(cfg, trace, factor, "rates").with_source(
            f"{trace.source}; replayed at {factor:.4g}x the recorded rate ({rate:g} req/s)")
    if cfg.n is not None:
        trace = trace.with_n(cfg.n)
    return trace if cfg.beam_width is None else trace.with_beam_width(cfg.beam_width)


def _scaled(cfg: WorkloadConfig, trace: Trace, factor: float, key: str) -> Trace:
    if not math.isfinite(trace.duration_s / factor):
        raise SpecError(cfg.source, key, f"replaying {Path(cfg.trace).name} at {factor:g}x its recorded rate puts "
                        "its arrivals past the largest float; choose a larger rate or time_scale")
    return trace.scaled(factor)


INF_NEEDS_A_COUNT = ("an infinite rate sends every request at 0 s, so the requests must be counted, not drawn "
                     "for workload.duration_s: give workload.num_requests (vLLM's --num-prompts)")


def _burstiness(raw: dict, source: str, replay: bool) -> dict:
    """burstiness: vLLM's shape of gamma gaps, which implies arrival: gamma; cv gives the same shape (1/cv^2) and
    another arrival none, so either one given beside it is refused. A replay sets it aside with the arrivals."""
    key = f"{SECTION}.burstiness"
    if raw.get("burstiness") is None:
        return {}
    value = number(raw["burstiness"], source, key, low=BURSTINESS_RANGE[0], high=BURSTINESS_RANGE[1])
    if replay:
        return {"burstiness": value}
    if raw.get("cv") is not None:
        raise SpecError(source, key, "and workload.cv both give the gaps' shape (cv = 1/sqrt(burstiness)); give one")
    if raw.get("arrival", "gamma") != "gamma":
        raise SpecError(source, key, f"shapes gamma arrivals (vLLM's gaps), not {raw['arrival']}; leave "
                        "workload.arrival out or set it to gamma")
    return {"burstiness": value, "arrival": "gamma"}


def _num_requests(raw: dict, source: str, replay: bool) -> int | None:
    """num_requests: a count of arrivals instead of a duration of them; both given would leave one unread."""
    key = f"{SECTION}.num_requests"
    if raw.get("num_requests") is None:
        return None
    count = positive_int(raw["num_requests"], source, key)
    if raw.get("duration_s") is not None and not replay:
        raise SpecError(source, key, "and workload.duration_s both say how many requests arrive; give one")
    return count


# the traces servesim ships (package data of sim.workload), found by name from any folder and any install
SHIPPED_TRACES = Shipped(Path(__file__).resolve().parent / "traces", ".csv", "sim/workload/traces", "trace")


def _path(raw: dict, key: str, source: str, base_dir) -> Path | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise SpecError(source, f"{SECTION}.{key}", f"must be a file path, got {value!r}")
    return resolve_path(value, base_dir, source, f"{SECTION}.{key}", SHIPPED_TRACES, what="a trace CSV")


def _dataset(value, source: str, base_dir) -> str:
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise SpecError(source, f"{SECTION}.dataset", f"must be one of {list(NAMES)} or a file path, "
                        f"got {value!r}")
    if str(value) in NAMES:
        return str(value)
    try:
        return str(resolve_path(value, base_dir, source, f"{SECTION}.dataset"))
    except SpecError as e:
        hint = "; no Alpaca file is shipped: use alpaca-standin or a path to alpaca_data.json" \
            if str(value).lower() == "alpaca" else ""
        raise SpecError(source, e.key, f"{value!r} is neither a dataset name {list(NAMES)} nor a prompt_len,"
                        f"output_len CSV, a conversation CSV or alpaca_data.json: {e.message}{hint}") from None


def _is_conversations(dataset: str) -> bool:
    """`chatbot`, or a file of conversations (told by its columns); never a file for a lengths name."""
    return dataset not in DATASET_NAMES and is_conversation_dataset(dataset)


def _chatbot_options(raw: dict, source: str, dataset: str | None) -> dict:
    """new_conversation_prob, for a conversation dataset; a replay (dataset None) sets the dataset aside, and
    with it this option of how arrivals are drawn from it."""
    key = "new_conversation_prob"
    if raw.get(key) is None:
        return {}
    if dataset is not None and not _is_conversations(dataset):
        raise SpecError(source, f"{SECTION}.{key}", "applies only to a conversation dataset (dataset: chatbot, "
                        "or a conversation,round,query_len,response_len CSV)")
    return {key: number(raw[key], source, f"{SECTION}.{key}", low=0, high=1)}


def _length_filter(raw: dict, source: str, dataset: str | None) -> dict:
    """length_filter: which build of sharegpt is read (every other dataset is kept by the model's max_seq_len
    under either); a replay (dataset None) sets the dataset aside, and with it the choice of its build."""
    key = "length_filter"
    if raw.get(key) is None:
        return {}
    value = choice(raw[key], source, f"{SECTION}.{key}", list(LENGTH_FILTERS))
    if dataset in PAPER_CUT_ONLY and value != "paper":
        raise SpecError(source, f"{SECTION}.{key}", (
            f"{dataset} is matched to Fig. 11's means on the pairs of the paper's cut, so it has no uncut "
            f"form; use length_filter: paper, or dataset: sharegpt with length_filter: {value}"))
    return {key: value}


def _tokenizer(raw: dict, source: str, dataset: str | None, model: ModelSpec | None) -> str:
    """workload.tokenizer, or the model's own (tokenizer_choice.model_tokenizer); set, it applies only to the
    datasets that ship in several counts. A replay (dataset None) sets the dataset aside, and with it this key."""
    key = "tokenizer"
    if raw.get(key) is None:
        return OPT if model is None else model_tokenizer(model)
    value = choice(raw[key], source, f"{SECTION}.{key}", list(TOKENIZERS))
    if dataset is not None and dataset not in COUNTED_DATASETS:
        raise SpecError(source, f"{SECTION}.{key}", (
            f"applies only to the shipped ShareGPT data (dataset: {' or '.join(COUNTED_DATASETS)}), counted by "
            f"each of {list(TOKENIZERS)}; {Path(dataset).name} carries its own counts"))
    return value


def _check_modes(raw: dict, source: str, values: dict) -> None:
    """A key that only applies in one mode refuses to be set without it (the replay keys, prefix_tokens and
    new_conversation_prob check their own), so a setting is never silently ignored. The one documented
    exception: workload.trace replaces a generated workload, whose dataset, length_filter, tokenizer, arrival, cv,
    duration_s and new_conversation_prob then stand aside (so `--set workload.trace=PATH` replays a trace
    through any config);
    prefix_tokens and system_prompt still go before every prompt, replayed ones too."""
    if values["trace"] is None and raw.get("cv") is not None and values["arrival"] != "gamma":
        raise SpecError(source, f"{SECTION}.cv", f"applies only to gamma arrivals (workload.arrival: gamma), "
                        f"not {values['arrival']}")
    # a replay's trace may carry its own beam_width column: the experiment checks it once read
    if raw.get("beam_continue") is not None and (values["beam_width"] or 1) == 1 \
            and (values["trace"] is None or values["beam_width"] == 1):
        raise SpecError(source, f"{SECTION}.beam_continue", "applies only to beam search; set workload.beam_width "
                        "above 1 (or replay a trace with a beam_width column)")


def _replay_options(raw: dict, source: str, replay: bool) -> dict:
    options = {}
    for key in ("time_scale", "window_s"):
        if raw.get(key) is not None and not replay:
            raise SpecError(source, f"{SECTION}.{key}", "applies only when replaying a recorded trace "
                            "(set workload.trace)")
    if raw.get("time_scale") is not None:
        options["time_scale"] = positive(raw["time_scale"], source, f"{SECTION}.time_scale")
    window = raw.get("window_s")
    if window is not None:
        if not (isinstance(window, (list, tuple)) and len(window) == 2 and all(map(is_number, window))
                and 0 <= window[0] < window[1]):
            raise SpecError(source, f"{SECTION}.window_s",
                            f"must be [start, end] seconds with 0 <= start < end, got {window!r}")
        options["window_s"] = (float(window[0]), float(window[1]))
    return options
