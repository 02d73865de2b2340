import pytest

from calibrate.hardware.hardware import load_hardware
from engine.specs.loader import load_model_spec


@pytest.fixture(scope="module")
def opt13b():
    return load_model_spec("opt-13b")


@pytest.fixture(scope="module")
def a100():
    return load_hardware("a100-40gb")
