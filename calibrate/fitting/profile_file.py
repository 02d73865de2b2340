"""A fitted profile on disk: coefficients, where they came from, and how wrong they are."""
from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

import yaml

from calibrate.parts.all_reduce import AllReduceTable
from calibrate.parts.attention_mixed import check_mixed
from calibrate.parts.host import HOST_TERMS
from calibrate.profiling.serving import PLAUSIBLE
from calibrate.work.features import TERMS, TERMS_ADDED_IN_3, TERMS_ADDED_IN_4
from calibrate.work.layer_ops import ELEMENTWISE
from engine.atomic import write_text_atomic
from engine.errors import SpecError
from engine.specs.checks import choice, known_keys, non_negative, number, optional, positive, positive_int, share
from engine.specs.loader import available_models, load_model_spec, read_yaml
from engine.specs.paths import Shipped

# /3 added per_prefill_s and mixed_s; /4 decode_block_s, block_sizes, and the swap's cost per copy and
# per byte in place of one cost per block; /5 the device part's source (device_part) and the host part's
# relative held-out errors and source (docs/cost-model-split.md); /6 names the swap's cost per copy
# swap_s_per_copy (swap_s_per_transfer before: "transfer" is the word for carrying a clock to another GPU)
# the shipped profiles (package data), found by name from any folder: cost_model.path (engine/specs/paths.py)
SHIPPED_PROFILES = Shipped(Path(__file__).resolve().parents[1] / "profiles", ".yaml", "calibrate/profiles",
                           "profile")
FORMAT_PREFIX = "servesim-profile/"
FORMAT = f"{FORMAT_PREFIX}6"
# /1 had a knee and power-of-two steps instead of the token table; /2 and /3 read with the added terms at 0
READABLE_FORMATS = ("servesim-profile/2", "servesim-profile/3", "servesim-profile/4", "servesim-profile/5", FORMAT)
COPY_NAMED_TRANSFER = ("servesim-profile/4", "servesim-profile/5")  # swap_s_per_copy was swap_s_per_transfer
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
# fields only an imported per-operation profile has (attention: only where measured attention kernels were imported)
IMPORTED_ONLY = ("linear", "all_reduce", "provenance", "attention")
FITTED_SINCE_5 = ("device_part",)  # absent from a profile loaded from an older format, as it was written
NAMED_ONLY = ("host_model",)  # absent from a profile that names no default host model
HOST_ERRORS = ("heldout_mean_abs_error_s", "heldout_p95_abs_error_s", "heldout_mape", "heldout_p95_ape")


@dataclass
class Profile:
    model: str
    device: str  # cpu | cuda
    device_name: str  # e.g. "NVIDIA H200" or the CPU model
    dtype: str
    tensor_parallel: int
    block_size: int
    token_knots: list[int]  # token counts where the token-cost table was fitted
    token_costs_s: list[float]  # its cost at each: weights, linear layers, kernels at that size
    coefficients: dict[str, float]
    heldout_mape: float  # mean absolute percentage error on held-out shapes, as a fraction
    heldout_p95_ape: float
    train_rows: int
    heldout_rows: int
    created: str
    command: str
    # a swap's cost (calibrate/profiling/profile.py swap_rows): per copy issued and per byte moved; None where not
    # measured
    swap_s_per_copy: float | None = None
    swap_s_per_byte: float | None = None
    # block sizes the decodes were timed at; decode_block_s is fitted only from two or more (empty: block_size)
    block_sizes: list[int] = field(default_factory=list)
    torch_threads: int | None = None  # CPU profiles: intra-op threads the engine ran with
    heldout_method: str = ""
    # the speed probe's median times while the grid was measured (calibrate/profiling/speed.py); a validation
    # compares its own probes against these to tell machine drift from cost-model error
    speed_reference: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    grid: dict = field(default_factory=dict)
    # the engine's host work around the forward (calibrate/parts/host.py): HOST_TERMS and their held-out error;
    # None where it was not measured (the simulator then charges the forward alone). From /5 also its
    # held-out error relative to each row's host time (heldout_mape, heldout_p95_ape) and measured_from
    host: dict | None = None
    # a replay's iterations served against the same shapes timed alone (calibrate/profiling/serving.py): the
    # forward is charged x factor; None where not measured (x1)
    serving: dict | None = None
    # an imported per-operation profile (calibrate/judging/op_import.py): the linear part's fitted parameters
    # (calibrate/fitting/op_fit.LinearFit, with its held-out errors), the measured all-reduce table by GPU count, and
    # where the measurements came from. Such a profile times only the non-attention part of an iteration:
    # its token-cost table and zero attention coefficients are not an iteration's cost, so it is used
    # through `cost_model: {kind: transfer}`, which prices attention from first principles, or by its
    # `attention` part where measured attention kernels were imported.
    linear: dict | None = None
    all_reduce: dict | None = None
    provenance: dict = field(default_factory=dict)
    # measured attention kernels (calibrate/parts/attention_fit.AttentionFit: latencies and shares of the measured GPU's
    # peaks, with their held-out errors); None where none were imported: attention then at the roofline's defaults
    attention: dict | None = None
    # the engine's host model (calibrate/host_models/) a config that names none is charged with, in place of `host`:
    # a GPU profile's stated default (docs/host-models.md); None: the profile's own `host`, or none
    host_model: str | None = None
    # the device part (the token-cost table and coefficients, held-out error heldout_mape and heldout_p95_ape):
    # measured_from (device_s, or time_s in a raw CSV from before the split) and the shapes it was fitted on;
    # None in a profile from before /5, whose forward time was fitted on time_s
    device_part: dict | None = None
    format: str = FORMAT

    def save(self, path: str | Path) -> Path:
        return write_text_atomic(path, dump_profile(self))


def _check_format(version, source: str) -> None:
    """Refuse what this servesim cannot read: an older format with the command that re-fits it, a newer one
    with what reads it (re-fitting would overwrite it), anything else as not a profile."""
    if version in READABLE_FORMATS:
        return
    number_text = version.removeprefix(FORMAT_PREFIX) if isinstance(version, str) else ""
    readable = f"{READABLE_FORMATS[0]} to {FORMAT}"
    if not number_text.isdigit():
        raise SpecError(source, "format", f"{version!r} is not a servesim profile format; this servesim reads "
                                          f"{readable}")
    if int(number_text) > int(FORMAT.removeprefix(FORMAT_PREFIX)):
        raise SpecError(source, "format", (
            f"{version!r} was written by a newer servesim; this one reads {readable}: read it with the "
            f"servesim that wrote it (its command is in the file's header), or upgrade servesim"))
    raise SpecError(source, "format", (
        f"{version!r} is older than this servesim reads ({readable}): re-fit it from its measurements "
        f"(servesim calibrate fit RAW.csv --out {source})"))


def _check(raw: dict, source: str) -> None:
    version = raw.get("format", "servesim-profile/1" if "knee_tokens" in raw else FORMAT)
    _check_format(version, source)
    legacy_swap = raw.pop("swap_s_per_block", None) if version in READABLE_FORMATS[:2] else None
    if version in COPY_NAMED_TRANSFER and "swap_s_per_transfer" in raw:
        raw["swap_s_per_copy"] = raw.pop("swap_s_per_transfer")
    known = {f.name for f in fields(Profile)}
    required = {f.name for f in fields(Profile) if f.default is MISSING and f.default_factory is MISSING}
    known_keys(raw, sorted(known), source)
    for key in sorted(required - set(raw)):
        raise SpecError(source, key, "missing required field")
    if raw["model"] not in available_models():
        raise SpecError(source, "model", f"unknown model {raw['model']!r}; available: {available_models()}")
    choice(raw["dtype"], source, "dtype", list(DTYPE_BYTES))  # the swap's bytes a block are the dtype's
    coefficients = raw["coefficients"]
    if not isinstance(coefficients, dict):
        raise SpecError(source, "coefficients", f"must map each of {list(TERMS)} to seconds")
    if version in READABLE_FORMATS[:2]:  # fitted without these terms: they cost nothing
        for term in (*(TERMS_ADDED_IN_3 if version == "servesim-profile/2" else ()), *TERMS_ADDED_IN_4):
            coefficients.setdefault(term, 0.0)
    for term in TERMS:
        if term not in coefficients:
            raise SpecError(source, f"coefficients.{term}", "missing coefficient")
    known_keys(coefficients, TERMS, source, "coefficients")
    for term, value in coefficients.items():
        non_negative(value, source, f"coefficients.{term}")  # seconds
    for key in ("heldout_mape", "heldout_p95_ape"):
        non_negative(raw[key], source, key)
    for key in ("tensor_parallel", "block_size"):
        positive_int(raw[key], source, key)
    for key in ("train_rows", "heldout_rows"):
        number(raw[key], source, key, low=0, whole=True)
    for key in ("swap_s_per_copy", "swap_s_per_byte"):
        optional(non_negative, raw.get(key), source, key)  # seconds
    _check_block_sizes(raw.get("block_sizes", []), source)
    optional(positive_int, raw.get("torch_threads"), source, "torch_threads")
    _check_table(raw["token_knots"], raw["token_costs_s"], source)
    _check_speed_reference(raw.get("speed_reference", {}), source)
    _check_host(raw.get("host"), source)
    _check_device_part(raw.get("device_part"), source)
    _check_serving(raw.get("serving"), source)
    _check_linear(raw.get("linear"), source)
    _check_attention(raw.get("attention"), source)
    _check_host_model(raw.get("host_model"), source)
    if raw.get("all_reduce") is not None:
        AllReduceTable.from_dict(raw["all_reduce"], source)
    if not isinstance(raw.get("provenance", {}), dict):
        raise SpecError(source, "provenance", "must map source, commit, licence and the like to text")
    if version != FORMAT:
        if legacy_swap is not None:
            _swap_per_block_to_bytes(raw, legacy_swap, source)
        raw["format"] = FORMAT


def _swap_per_block_to_bytes(raw: dict, per_block, source: str) -> None:
    """A /2 or /3 profile's swap_s_per_block, timed on blocks the engine copied as one run per layer, is a cost
    per byte: read as that, with nothing per copy (it charges what it charged at its block size)."""
    non_negative(per_block, source, "swap_s_per_block")
    model = load_model_spec(raw["model"])
    block_bytes = model.kv_bytes_per_token(DTYPE_BYTES[raw["dtype"]]) * raw["block_size"] / raw["tensor_parallel"]
    raw["swap_s_per_copy"], raw["swap_s_per_byte"] = 0.0, per_block / block_bytes


def _check_host_model(name, source: str) -> None:
    if name is None:
        return
    from calibrate.parts.host_model import available_host_models

    choice(name, source, "host_model", available_host_models())


def _check_block_sizes(block_sizes, source: str) -> None:
    if not isinstance(block_sizes, list):
        raise SpecError(source, "block_sizes", f"must be a list of block sizes in tokens, got {block_sizes!r}")
    for i, size in enumerate(block_sizes):
        positive_int(size, source, f"block_sizes[{i}]")


def _check_linear(linear, source: str) -> None:
    if linear is None:
        return
    if not isinstance(linear, dict):
        raise SpecError(source, "linear", "must map the linear part's fitted parameters (calibrate/fitting/op_fit.py)")
    check_fit(linear, source, "linear")
    gpus = linear.get("gpus", {})
    if not isinstance(gpus, dict):
        raise SpecError(source, "linear.gpus", "must map each measured GPU's name to its own fit")
    for name, fit in gpus.items():
        if not isinstance(fit, dict):
            raise SpecError(source, f"linear.gpus.{name}", "must map that GPU's own fitted parameters")
        check_fit(fit, source, f"linear.gpus.{name}")
    heldout = linear.get("heldout", {})
    judged = heldout.get("two_gpus") if isinstance(heldout, dict) else None
    if gpus and judged is None:
        raise SpecError(source, "linear.heldout.two_gpus", "missing: a fit on two GPUs keeps its held-out "
                        "judgement (calibrate/judging/transfer_two_gpus.py), which sets its default by regime")
    if judged is not None:
        _check_two_gpu_judgement(judged, source)


def check_fit(fit: dict, source: str, key: str) -> None:
    """A linear part's parameters (LinearFit.to_dict), each bad one a one-line error naming `key` under it."""
    for name in ("compute_efficiency", "bandwidth_efficiency", "ridge_efficiency"):
        share(fit.get(name), source, f"{key}.{name}")
    non_negative(fit.get("gemm_latency_s"), source, f"{key}.gemm_latency_s")  # seconds
    # an L2's reads may be faster than HBM (calibrate/fitting/l2_resident.py): any positive share
    optional(positive, fit.get("resident_bandwidth_efficiency"), source, f"{key}.resident_bandwidth_efficiency")
    elementwise = fit.get("elementwise", {})
    if not isinstance(elementwise, dict):
        raise SpecError(source, f"{key}.elementwise", "must map kernels to latency_s and bandwidth_efficiency")
    known_keys(elementwise, ELEMENTWISE, source, f"{key}.elementwise")
    for op, terms in elementwise.items():
        if not isinstance(terms, dict):
            raise SpecError(source, f"{key}.elementwise.{op}", "must map latency_s and bandwidth_efficiency")
        non_negative(terms.get("latency_s"), source, f"{key}.elementwise.{op}.latency_s")
        share(terms.get("bandwidth_efficiency"), source, f"{key}.elementwise.{op}.bandwidth_efficiency")


JUDGED_ERRORS = ("mean", "worst", "roofline_mean", "roofline_worst")


def _check_two_gpu_judgement(judged, source: str) -> None:
    """Each entry one direction's regime: which, over how many rows, its errors and the roofline's."""
    from calibrate.parts.transfer import FINE_REGIMES

    if not isinstance(judged, list) or not judged:
        raise SpecError(source, "linear.heldout.two_gpus", "must list each direction's error per regime")
    for i, entry in enumerate(judged):
        key = f"linear.heldout.two_gpus[{i}]"
        if not isinstance(entry, dict):
            raise SpecError(source, key, "must map direction, regime, rows and the errors")
        if not isinstance(entry.get("direction"), str) or " -> " not in entry["direction"]:
            raise SpecError(source, f"{key}.direction",
                            f"must say 'FITTED -> HELD OUT', got {entry.get('direction')!r}")
        choice(entry.get("regime"), source, f"{key}.regime", list(FINE_REGIMES))
        positive_int(entry.get("rows"), source, f"{key}.rows")
        for name in JUDGED_ERRORS:
            non_negative(entry.get(name), source, f"{key}.{name}")


ATTENTION_SHARES = ("decode_bandwidth_efficiency",)
# the prefill's FLOPs are counted over every new token against every key (calibrate/parts/attention_fit.py); a kernel
# that skips the causal half computes as few as half of them, so its share of the peak at that count is up to 2
# (the LLMServingSim RTX 4090 bundle's: 1.40)
RECTANGLE_OVERCOUNT = 2.0
ATTENTION_OPTIONAL_SHARES = ("prefill_kv_bandwidth_efficiency", "prefill_output_bandwidth_efficiency")
ATTENTION_KEYS = ("decode_latency_s", "prefill_latency_s", *ATTENTION_SHARES, "prefill_compute_efficiency",
                  *ATTENTION_OPTIONAL_SHARES,
                  "block_size", "measured_on", "heldout", "source", "waves", "mixed")
WAVE_KEYS = ("latency_s", "split_latency_s", "wave_latency_s", "bandwidth_efficiency", "blocks_per_sm",
             "floor_shares", "heuristic_sm_multiple", "launch_tokens")


def _check_attention(attention, source: str) -> None:
    if attention is None:
        return
    if not isinstance(attention, dict):
        raise SpecError(source, "attention", "must map the measured attention's latencies and shares "
                        "(calibrate/parts/attention_fit.py)")
    known_keys(attention, ATTENTION_KEYS, source, "attention")
    for key in ("decode_latency_s", "prefill_latency_s"):
        non_negative(attention.get(key), source, f"attention.{key}")  # seconds per layer
    for key in ATTENTION_SHARES:
        share(attention.get(key), source, f"attention.{key}")
    number(attention.get("prefill_compute_efficiency"), source, "attention.prefill_compute_efficiency", low=0,
           low_open=True, high=RECTANGLE_OVERCOUNT)
    for key in ATTENTION_OPTIONAL_SHARES:  # null: the fit found no cost in that term
        optional(share, attention.get(key), source, f"attention.{key}")
    positive_int(attention.get("block_size", 16), source, "attention.block_size")
    for key in ("measured_on", "source"):
        if not isinstance(attention.get(key, ""), str):
            raise SpecError(source, f"attention.{key}", "must be text")
    if not isinstance(attention.get("heldout", {}), dict):
        raise SpecError(source, "attention.heldout", "must map decode and prefill to their held-out errors")
    _check_waves(attention.get("waves"), source)
    check_mixed(attention.get("mixed"), source)


def _check_waves(waves, source: str) -> None:
    """The decode wave model (calibrate/parts/attention_waves.WaveFit), where one was fitted."""
    if waves is None:
        return
    if not isinstance(waves, dict):
        raise SpecError(source, "attention.waves", f"must map {list(WAVE_KEYS)} (calibrate/parts/attention_waves.py)")
    known_keys(waves, WAVE_KEYS, source, "attention.waves")
    for key in ("latency_s", "split_latency_s", "wave_latency_s"):
        non_negative(waves.get(key), source, f"attention.waves.{key}")  # seconds per layer
    share(waves.get("bandwidth_efficiency"), source, "attention.waves.bandwidth_efficiency")
    for key in ("blocks_per_sm", "heuristic_sm_multiple", "launch_tokens"):
        positive_int(waves.get(key), source, f"attention.waves.{key}")
    floors = waves.get("floor_shares")
    if not isinstance(floors, list) or len(floors) != waves["blocks_per_sm"]:
        raise SpecError(source, "attention.waves.floor_shares",
                        f"must list one share of the SM count per block an SM holds ({waves['blocks_per_sm']}), "
                        f"got {floors!r}")
    for i, floor in enumerate(floors):
        positive(floor, source, f"attention.waves.floor_shares[{i}]")


def _check_host(host, source: str) -> None:
    if host is None:
        return
    if not isinstance(host, dict):
        raise SpecError(source, "host", f"must map {list(HOST_TERMS)} to seconds")
    for term in HOST_TERMS:
        non_negative(host.get(term), source, f"host.{term}")  # seconds
    for key in HOST_ERRORS:  # fractions and seconds; a profile from before /5 has only the absolute mean
        optional(non_negative, host.get(key), source, f"host.{key}")
    if not isinstance(host.get("measured_from", ""), str):
        raise SpecError(source, "host.measured_from", "must say in words which rows the host part was fitted on")


def _check_device_part(part, source: str) -> None:
    if part is None:
        return
    if not isinstance(part, dict) or not isinstance(part.get("measured_from"), str):
        raise SpecError(source, "device_part", "must map measured_from (in words: device_s or time_s) and shapes")
    positive_int(part.get("shapes"), source, "device_part.shapes")


def _check_serving(serving, source: str) -> None:
    if serving is None:
        return
    if not isinstance(serving, dict):
        raise SpecError(source, "serving", "must map factor, iterations, served_s and alone_s to numbers")
    # outside these a "factor" is a broken measurement, not what serving costs beyond the shapes alone
    number(serving.get("factor"), source, "serving.factor", low=PLAUSIBLE[0], high=PLAUSIBLE[1])
    positive_int(serving.get("iterations"), source, "serving.iterations")


def _check_speed_reference(reference, source: str) -> None:
    if not isinstance(reference, dict):
        raise SpecError(source, "speed_reference", f"must be a mapping (decode_s, prefill_s, ...), got {reference!r}")
    if not reference:
        return  # profiled before the speed probe: validation simulates it as calibrated
    for key in ("decode_s", "prefill_s"):
        positive(reference.get(key), source, f"speed_reference.{key}")  # seconds

def _check_table(knots, costs, source: str) -> None:
    ok = isinstance(knots, list) and knots and all(isinstance(k, int) and not isinstance(k, bool) and k > 0
                                                   for k in knots)
    if not ok or any(b <= a for a, b in zip(knots, knots[1:])):
        raise SpecError(source, "token_knots", f"must be a non-empty list of increasing positive token counts, "
                        f"got {knots!r}")
    if not isinstance(costs, list) or len(costs) != len(knots):
        raise SpecError(source, "token_costs_s", f"must list one cost per knot ({len(knots)}), got {costs!r}")
    for i, c in enumerate(costs):
        non_negative(c, source, f"token_costs_s[{i}]")  # seconds


def profile_from_dict(raw: dict, source: str) -> Profile:
    if not isinstance(raw, dict):
        raise SpecError(source, "", "a profile must be a YAML mapping")
    _check(raw, source)
    return Profile(**raw)


def load_profile(path: str | Path) -> Profile:
    return profile_from_dict(read_yaml(path, "profile file"), str(path))


def _attention_line(attention: dict | None) -> str:
    if not attention or not attention.get("heldout"):
        return ""
    from calibrate.parts.attention_fit import AttentionFit

    return f"# held-out error of the attention part: {AttentionFit.from_dict(attention).heldout_summary()}\n"


def _held_out_what(linear: dict) -> str:
    """What the headline error held out: models, or where one model was measured, octaves of its token counts
    (calibrate/judging/bundle_import.py)."""
    heldout = linear.get("heldout", {})
    return "octaves of token counts" if "by_octave" in heldout and "by_model" not in heldout else "models"


def dump_profile(profile: Profile) -> str:
    data = asdict(profile)
    for key in (*IMPORTED_ONLY, *FITTED_SINCE_5, *NAMED_ONLY):  # absent from a profile without them, as before
        if not data[key]:
            del data[key]
    scope = (f" of the linear part, on held-out {_held_out_what(profile.linear)}" if profile.linear
             else " of the device part" if profile.device_part else "")
    host = profile.host or {}
    host_line = (f"# held-out error of the host part: mean {host['heldout_mape']:.1%}, "
                 f"p95 {host['heldout_p95_ape']:.1%}\n" if "heldout_mape" in host else "")
    header = (f"# servesim cost-model profile: {profile.model} on {profile.device_name} ({profile.dtype})\n"
              f"# held-out error{scope}: mean {profile.heldout_mape:.1%}, p95 {profile.heldout_p95_ape:.1%}\n"
              f"{host_line}{_attention_line(profile.attention)}# made by: {profile.command}\n")
    return header + yaml.safe_dump(data, sort_keys=False)
