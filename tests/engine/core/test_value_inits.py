"""The control plane's per-step values (Batch, KVUsage, Step, DecodeStretch) write their __init__ out, so that
mypyc compiles it: each must take every field, by its name, with the field's default, as the dataclass's own
would."""
from __future__ import annotations

import dataclasses

import pytest

from engine.core.batch import Batch
from engine.core.kv_usage import KVUsage
from engine.core.scheduler.base import DecodeStretch
from engine.core.serving import Step


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
            "stretch": DecodeStretch(Batch(), 3), "num_steps": 7}


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


@pytest.mark.parametrize("cls", [Batch, KVUsage, Step, DecodeStretch])
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
