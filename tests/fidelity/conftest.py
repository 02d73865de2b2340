"""Fixtures of the validation tests (the config and profile texts live in validate_tiny.py)."""
import pytest

pytest.importorskip("torch")

from validate_tiny import TINY_LENGTHS, TINY_VALIDATION, profile_text  # noqa: E402


@pytest.fixture
def tiny_validation(tmp_path):
    """Write the tiny config, its lengths and its profile into tmp_path; returns a writer for variants."""
    def write(config: str = TINY_VALIDATION, profile: str | None = None, lengths: str = TINY_LENGTHS):
        (tmp_path / "lengths.csv").write_text(lengths)
        (tmp_path / "profile.yaml").write_text(profile or profile_text())
        path = tmp_path / "tiny.yaml"
        path.write_text(config)
        return path

    return write


@pytest.fixture(autouse=True)
def _single_thread(one_cpu_thread):
    yield
