"""Fixtures of the validation tests (the config and profile texts live in tests/helpers/validate_tiny.py)."""
import pytest

pytest.importorskip("torch")

from tests.helpers.validate_tiny import TINY_VALIDATION, write_tiny_validation  # noqa: E402


@pytest.fixture
def tiny_validation(tmp_path):
    """Write the tiny config, its lengths and its profile into tmp_path; returns a writer for variants."""
    def write(config: str = TINY_VALIDATION, **files):
        return write_tiny_validation(tmp_path, config, **files)

    return write


@pytest.fixture(autouse=True)
def _single_thread(one_cpu_thread):
    yield
