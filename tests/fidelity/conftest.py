"""Fixtures of the validation tests (the config and profile texts live in tests/helpers/validate_tiny.py).

The tests that run the real engine skip without torch, each module for itself; those of a real serving run read
from files (fidelity/runs/) need none, and run anywhere."""
import importlib.util

import pytest

from tests.helpers.validate_tiny import TINY_VALIDATION, write_tiny_validation


@pytest.fixture
def tiny_validation(tmp_path):
    """Write the tiny config, its lengths and its profile into tmp_path; returns a writer for variants."""
    def write(config: str = TINY_VALIDATION, **files):
        return write_tiny_validation(tmp_path, config, **files)

    return write


@pytest.fixture(autouse=True)
def _single_thread(request):
    if importlib.util.find_spec("torch") is None:  # nothing here runs torch
        yield
        return
    request.getfixturevalue("one_cpu_thread")
    yield
