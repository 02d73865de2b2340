"""Stand-ins for the tests of a command's or a function's door: where its work would start, and a made-up
capacity probe."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.helpers.configs import tiny


class Reached(BaseException):
    """Raised where a command's or function's work would start: its arguments passed the door (a BaseException,
    so that neither main nor the code under test catches it)."""


def reached(*args, **kwargs):
    raise Reached(args, kwargs)


def write_api_folder(folder: Path) -> None:
    """The API door tests' folder: a tiny two-system experiment of 6-s traces, and a file where a folder may be
    asked for."""
    (folder / "tiny.yaml").write_text(tiny(systems="[vllm, orca-oracle]", rates="[2]",
                                           workload="{dataset: sharegpt-standin, duration_s: 6}", warmup_s="1"))
    (folder / "file.txt").write_text("not a folder\n")


@dataclass
class FakeProbe:
    """A made-up capacity probe: the answer a search reads from it is its `holds`."""
    rate: float
    replicas: int
    value: float
    holds: bool | None


def fake_holds(probe: FakeProbe) -> bool | None:
    return probe.holds
