"""The paper's claims, as claims.yaml lists them: each with the reader that reads it off the reproduced
figures (sim/reproduce/rate_claims.py, memory_claims.py, cost_claims.py) and that reader's arguments. The
file ships with the package; a claim that names no known reader, or arguments its reader does not take, is
an error naming the claim, raised when the file is loaded rather than when the claim is read."""
from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import SpecError
from engine.specs.loader import read_yaml
from sim.reproduce import cost_claims, memory_claims, rate_claims
from sim.reproduce.figures import FIGURES
from sim.reproduce.readings import Reading
from sim.reproduce.results import Results

CLAIMS_FILE = Path(__file__).resolve().parent / "claims.yaml"
READERS: dict[str, Callable[..., Reading]] = {**rate_claims.READERS, **memory_claims.READERS,
                                              **cost_claims.READERS}
TEXT_KEYS = ("id", "figure", "basis", "statement", "paper")


@dataclass(frozen=True)
class Claim:
    id: str
    figure: str  # the paper's figure (and panel), e.g. "12a-c"
    statement: str  # the paper's words, or the arithmetic on them
    paper: str  # the value as the paper prints it
    basis: str  # text | figure axes | arithmetic
    kind: str  # its reader, a key of READERS
    arguments: dict = field(default_factory=dict)  # the reader's, as claims.yaml gives them

    def read(self, results: Results) -> Reading:
        return READERS[self.kind](results, **self.arguments)

    @property
    def data(self) -> str:
        """The reproduced figure it reads."""
        return re.match(r"fig\d+", self.id).group()

    @property
    def predicted(self) -> bool:
        """Whether it reads a cost model's prediction (Figs. 18a and 19a) rather than simulated runs."""
        return self.id.startswith(("fig18a.", "fig19a."))


def load_claims(path: Path = CLAIMS_FILE) -> tuple[Claim, ...]:
    raw = read_yaml(path, "the paper's claims")
    entries = raw.get("claims") if isinstance(raw, dict) else None
    if not isinstance(entries, list):
        raise SpecError(str(path), "claims", "must be a list of claims")
    return tuple(_claim(entry, str(path), i) for i, entry in enumerate(entries))


def _claim(entry: object, source: str, index: int) -> Claim:
    where = f"claims[{index}]"
    if not isinstance(entry, dict) or set(entry) != {*TEXT_KEYS, "read"}:
        raise SpecError(source, where, f"a claim has exactly the keys {', '.join(TEXT_KEYS)}, read")
    where = f"claims[{index}] ({entry['id']})"
    if any(not isinstance(entry[key], str) for key in TEXT_KEYS):
        raise SpecError(source, where, f"{', '.join(TEXT_KEYS)} are each text")
    read = entry["read"]
    kind = read.get("kind") if isinstance(read, dict) else None
    if kind not in READERS:
        raise SpecError(source, f"{where}.read.kind", f"{kind!r} is not one of {', '.join(sorted(READERS))}")
    arguments = {key: value for key, value in read.items() if key != "kind"}
    id_figure = re.match(r"fig\d+", entry["id"])
    if id_figure is None or not {id_figure.group(), arguments.get("figure", id_figure.group())} <= set(FIGURES):
        raise SpecError(source, where, f"the id and read.figure name a reproduced figure, one of {', '.join(FIGURES)}")
    try:
        inspect.signature(READERS[kind]).bind(None, **arguments)
    except TypeError as err:
        raise SpecError(source, f"{where}.read", f"not the arguments of kind {kind}: {err}") from None
    return Claim(entry["id"], entry["figure"], entry["statement"], entry["paper"], entry["basis"], kind, arguments)


CLAIMS = load_claims()
