"""The control plane's per-step and per-request values (Batch, KVUsage, Step, DecodeStretch, Sequence, SequenceGroup,
the simulator's Stretch) write their __init__ out, so that mypyc compiles it: each must take every field, by its name,
with the field's default, as the dataclass's own would."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine.core.batch import Batch
from engine.core.kv_usage import KVUsage
from engine.core.scheduler.base import DecodeStretch
from engine.core.scheduler.speculating_stretch import SpeculatingSteps
from engine.core.sequence import SeqStatus, Sequence, SequenceGroup
from engine.core.serving import Step
from engine.core.speculative import SpeculativeSpec
from sim.core.acceptance import AcceptanceModel
from sim.core.fast_forward import Stretch


def _field_default(f: dataclasses.Field):
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


@pytest.mark.parametrize("cls", [Batch, KVUsage])
def test_no_arguments_give_every_fields_default_and_fresh_lists(cls):
    a, b = cls(), cls()
    for f in dataclasses.fields(cls):
        assert getattr(a, f.name) == _field_default(f), f.name
        if isinstance(getattr(a, f.name), list):
            assert getattr(a, f.name) is not getattr(b, f.name), f"{f.name}: one list shared by two values"


# the fields without a default, by name: each a distinct value of its type
REQUIRED = {"batch": Batch(num_running_groups=9), "usage": KVUsage(idle=9), "start_s": 2.5, "num_waiting": 4,
            "stretch": DecodeStretch(Batch(), 3), "num_steps": 7, "seq_id": 11, "prompt_len": 12, "output_len": 13,
            "status": SeqStatus.SWAPPED, "request_id": 14, "arrival_s": 3.5, "seqs": [Sequence(1, 2, 3)],
            "first_token_s": 4.5, "finish_s": 5.5, "shares_prompt": False, "is_beam": True, "block_keys": (7, 8),
            "step": Step(Batch(), KVUsage(), 6.5, 1), "ends": [7.5], "resume": object(), "alarm": object(),
            "speculating": SpeculatingSteps(Batch(), [], [], [], 2, 16, 0, 0),
            "acceptance": AcceptanceModel(SpeculativeSpec("ngram", 1, (0.5,)), np.random.default_rng(0))}


def _marker(f: dataclasses.Field, i: int):
    """A value of the field's type that no other field and no default holds."""
    if f.name in REQUIRED:
        return REQUIRED[f.name]
    default = _field_default(f)
    if isinstance(default, list):
        return [(i, i)]
    if isinstance(default, int):
        return 1000 + i
    raise AssertionError(f"{f.name}: no marker for a field defaulting to {default!r}; add one to REQUIRED")


@pytest.mark.parametrize("cls", [Batch, KVUsage, Step, DecodeStretch, Sequence, SequenceGroup, Stretch])
def test_every_field_is_taken_by_its_name(cls):
    values = {f.name: _marker(f, i) for i, f in enumerate(dataclasses.fields(cls))}
    value = cls(**values)
    for name, marker in values.items():
        assert getattr(value, name) is marker or getattr(value, name) == marker, name
    copy = dataclasses.replace(value)  # what replace() passes, taken back (DecodeStretch compares by identity)
    assert all(getattr(copy, name) == getattr(value, name) for name in values)


def test_a_stretch_grows_in_a_list_of_its_own_by_default():
    a, b = DecodeStretch(Batch(), 1), DecodeStretch(Batch(), 1)
    assert a.growth == [] and a.growth is not b.growth


def test_step_leaves_its_stretch_none_by_default():
    assert Step(Batch(), KVUsage(), 1.5, 3).stretch is None


def test_a_sequence_starts_as_its_prompt_and_a_stretch_queues_in_a_list_of_its_own():
    assert Sequence(1, 12, 5).length == 12 and Sequence(1, 12, 5, length=15).length == 15
    assert Sequence(1, 12, 5).status is SeqStatus.WAITING
    step = Step(Batch(), KVUsage(), 1.5, 3)
    a, b = Stretch(step, [2.0], 1), Stretch(step, [2.0], 1)
    assert a.queued_s == [] and a.queued_s is not b.queued_s and a.resume is None and a.alarm is None
    group = SequenceGroup(3, 1.0, [Sequence(1, 12, 5)])
    expected = {f.name: f.default for f in dataclasses.fields(SequenceGroup) if f.default is not dataclasses.MISSING}
    assert {name: getattr(group, name) for name in expected} == expected
