"""A serving engine's host time per iteration, by named term, for any model and tensor-parallel degree.

An iteration's time is device time plus host time (docs/cost-model-split.md). The host time belongs to
the serving engine on its host CPU: scheduling, sampling, building inputs, processing outputs, talking to
its workers. A HostModel holds one engine's measured host work as named terms, each a sum of coefficients
times the features of calibrate/work/host_features.py (per iteration, per sequence, per prompt token, scaled by
the model's vocabulary or context, or by the tensor-parallel workers). For a (ModelSpec, tensor_parallel)
it resolves to calibrate/parts/host.py's three HOST_TERMS, the floats RooflineCostModel and ProfileCostModel
already charge, so the cost models' arithmetic is unchanged.

Its per-term breakdown of one batch sums each term's own per-iteration, per-sequence and per-prompt-token
parts. The resolved HOST_TERMS are the same parts summed term by term first, so the breakdown's sum and the
charged host time are the same sum in another order: equal to within rounding (a few parts in 1e16), not
always to the bit.

Where the shipped fits differ from Vidur's predictor (which adds schedule, sampler_e2e, prepare_inputs_e2e,
process_model_outputs medians and ray_comm_time's mean to each iteration, interpolated by batch size within
one model's and one tensor-parallel degree's rows): calibrate/fitting/host_model_fit.py, docs/host-models.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from calibrate.parts.host import HOST_TERMS
from calibrate.work.host_features import FEATURES, ITERATION, PREFILL_TOKEN, SEQUENCE, ModelSize
from engine.atomic import write_text_atomic
from engine.core.spec import ModelSpec
from engine.errors import SpecError
from engine.specs.checks import known_keys, non_negative
from engine.specs.loader import read_yaml
from engine.specs.paths import Shipped

FORMAT = "servesim-host-model/1"
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "host_models"
SHIPPED_HOST_MODELS = Shipped(SHIPPED_DIR, ".yaml", "calibrate/host_models", "host model")
KEYS = ("format", "name", "measured", "source", "licence", "terms", "heldout", "engine")
# an engine model's mechanisms beyond its host terms (calibrate/clock/engine_clock.py), each with what it means
ENGINE_KEYS = {
    "overlap": "the engine schedules asynchronously: where a system does (async_scheduling), its host work overlaps "
               "the GPU's and an iteration takes the longer of the two",
    "cuda_graphs": "the engine replays CUDA graphs at vLLM's capture sizes: an iteration's linear layers run at the "
                   "smallest captured size that holds it",
    "custom_all_reduce": "the engine all-reduces tensor parallelism's messages up to its buffer with its own kernel "
                         "(vLLM's custom all-reduce, calibrate/parts/custom_all_reduce.py), NCCL's above",
    "serial": "the host terms that stay in series with the GPU under overlap (the step's synchronisation and "
              "launches): an iteration takes max(device, the other host terms) + these",
}


@dataclass(frozen=True)
class EngineMechanisms:
    """What an engine does beyond its host terms, each switched on by its engine model (ENGINE_KEYS)."""

    overlap: bool = False
    cuda_graphs: bool = False
    serial: tuple[str, ...] = ()  # names of host terms
    custom_all_reduce: bool = False

    @classmethod
    def from_dict(cls, raw: object, source: str, terms: dict) -> EngineMechanisms:
        if not isinstance(raw, dict):
            raise SpecError(source, "engine", f"must map mechanisms to their settings: {sorted(ENGINE_KEYS)}")
        known_keys(raw, sorted(ENGINE_KEYS), source, "engine")
        for key, value in raw.items():
            if key != "serial" and not isinstance(value, bool):
                raise SpecError(source, f"engine.{key}", f"must be true or false, got {value!r}")
        serial = raw.get("serial", [])
        if not isinstance(serial, list) or any(name not in terms for name in serial):
            raise SpecError(source, "engine.serial", f"must list host terms of this model {sorted(terms)}, "
                            f"got {serial!r}")
        return cls(bool(raw.get("overlap", False)), bool(raw.get("cuda_graphs", False)), tuple(serial),
                   bool(raw.get("custom_all_reduce", False)))

    def to_dict(self) -> dict:
        return {"overlap": self.overlap, "cuda_graphs": self.cuda_graphs, "serial": list(self.serial),
                "custom_all_reduce": self.custom_all_reduce}


@dataclass(frozen=True)
class HostModel:
    """`terms`: term -> {feature (calibrate/work/host_features.FEATURES) -> coefficient}, in the order they are
    summed; `measured`: what the engine and machine were, in words; `heldout`: the fit's held-out errors
    (calibrate/fitting/host_model_fit.py), or where the figures were cited from and how they were judged."""

    name: str
    measured: str
    source: str
    licence: str
    terms: dict[str, dict[str, float]]
    heldout: dict = field(default_factory=dict)
    engine: EngineMechanisms = EngineMechanisms()  # none: a host model of an engine that runs in series, eager

    @property
    def what(self) -> str:
        """What it measured, short: `measured` up to its first ': ' (a run's cost_model column names it)."""
        return self.measured.split(": ", 1)[0]

    def term_parts(self, term: str, spec: ModelSpec | ModelSize, tp: int) -> dict[str, float]:
        """One term's seconds per iteration, per sequence and per prompt token at (model, tp)."""
        size = spec if isinstance(spec, ModelSize) else ModelSize.of(spec)
        parts = {ITERATION: 0.0, SEQUENCE: 0.0, PREFILL_TOKEN: 0.0}
        for feature, coefficient in self.terms[term].items():
            f = FEATURES[feature]
            parts[f.paid] += coefficient * f.scale(size, tp)
        return parts

    def resolve(self, spec: ModelSpec | ModelSize, tp: int) -> dict[str, float]:
        """The HOST_TERMS a cost model charges for this model at this tensor-parallel degree: each term's
        parts, summed in the terms' order."""
        host = dict.fromkeys(HOST_TERMS, 0.0)
        for term in self.terms:
            for key, value in self.term_parts(term, spec, tp).items():
                host[key] += value
        return host

    def breakdown(self, spec: ModelSpec | ModelSize, tp: int, num_seqs: int,
                  num_prefill_tokens: int = 0) -> dict[str, float]:
        """Each term's seconds for one batch; they add up to calibrate.parts.host.host_time(resolve(...)) within
        rounding (the module's docstring says why not always to the bit)."""
        out = {}
        for term in self.terms:
            p = self.term_parts(term, spec, tp)
            out[term] = p[ITERATION] + p[SEQUENCE] * num_seqs + p[PREFILL_TOKEN] * num_prefill_tokens
        return out

    def serial_time(self, spec: ModelSpec | ModelSize, tp: int, num_seqs: int, num_prefill_tokens: int = 0) -> float:
        """The seconds of the terms that stay in series with the GPU (EngineMechanisms.serial) for one batch."""
        if not self.engine.serial:
            return 0.0
        parts = self.breakdown(spec, tp, num_seqs, num_prefill_tokens)
        return sum(parts[term] for term in self.engine.serial)

    def to_dict(self) -> dict:
        out = {"format": FORMAT, "name": self.name, "measured": self.measured, "source": self.source,
               "licence": self.licence, "terms": {t: dict(c) for t, c in self.terms.items()},
               "heldout": self.heldout}
        if self.engine != EngineMechanisms():
            out["engine"] = self.engine.to_dict()
        return out

    @classmethod
    def from_dict(cls, raw: object, source: str) -> HostModel:
        if not isinstance(raw, dict):
            raise SpecError(source, "", "a host model is a YAML mapping")
        known_keys(raw, KEYS, source)
        if raw.get("format") != FORMAT:
            raise SpecError(source, "format", f"must be {FORMAT!r}, got {raw.get('format')!r}")
        for key in ("name", "measured", "source", "licence"):
            if not isinstance(raw.get(key), str) or not raw[key].strip():
                raise SpecError(source, key, "missing: a host model says what it is, what it measured, "
                                "where its figures come from and under what licence")
        terms = raw.get("terms")
        if not isinstance(terms, dict) or not terms:
            raise SpecError(source, "terms", "must map each term's name to its coefficients")
        heldout = raw.get("heldout", {})
        if not isinstance(heldout, dict):
            raise SpecError(source, "heldout", "must be a mapping")
        engine = (EngineMechanisms.from_dict(raw["engine"], source, terms) if "engine" in raw
                  else EngineMechanisms())
        return cls(raw["name"], raw["measured"], raw["source"], raw["licence"],
                   {str(t): _coefficients(c, source, f"terms.{t}") for t, c in terms.items()}, heldout, engine)


def _coefficients(raw: object, source: str, key: str) -> dict[str, float]:
    if not isinstance(raw, dict) or not raw:
        raise SpecError(source, key, f"must map features to seconds; features are {sorted(FEATURES)}")
    out = {}
    known_keys(raw, sorted(FEATURES), source, key)
    for feature, value in raw.items():
        out[str(feature)] = non_negative(value, source, f"{key}.{feature}")
    return out


def available_host_models() -> list[str]:
    return sorted(p.stem for p in SHIPPED_DIR.glob("*.yaml"))


def host_model_path(name_or_path: str | Path) -> Path:
    """A shipped host model's file by name, or the path given."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        return path
    shipped = SHIPPED_DIR / f"{name_or_path}.yaml"
    if not shipped.exists():
        raise SpecError("host model", str(name_or_path), f"unknown host model; shipped: {available_host_models()} "
                        "(or give a host model YAML's path)")
    return shipped


def load_host_model(name_or_path: str | Path) -> HostModel:
    path = host_model_path(name_or_path)
    return HostModel.from_dict(read_yaml(path, "host model"), str(path))


def is_host_model_file(path: str | Path) -> bool:
    """Whether a YAML file says it is a host model (so `calibrate show` can tell one from a profile)."""
    try:
        raw = read_yaml(path, "YAML file")
    except SpecError:
        return False
    return isinstance(raw, dict) and raw.get("format") == FORMAT


def charged_host(path: str | Path, spec: ModelSpec, tp: int) -> tuple[dict[str, float], str]:
    """A host model's HOST_TERMS for (spec, tp), and what a cost model's source says of it."""
    model = load_host_model(path)
    return model.resolve(spec, tp), f"host: {model.name} ({model.what})"


def save_host_model(model: HostModel, path: str | Path, command: str = "") -> Path:
    header = f"# servesim host model: {model.name}: {model.measured}\n"
    if command:
        header += f"# made by: {command}\n"
    return write_text_atomic(path, header + yaml.safe_dump(model.to_dict(), sort_keys=False, width=110))
