"""Hardware spec sheets and the errors a user can cause writing one."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from calibrate.hardware import (
    GIB,
    HARDWARE_DIR,
    available_hardware,
    hardware_from_dict,
    load_hardware,
)
from engine.specs.errors import SpecError

GOOD = dict(name="my-gpu", peak_flops=312e12, hbm_bytes_per_s=1.555e12, memory_gib=39.59,
            nvlink_bytes_per_s=300e9, pcie_bytes_per_s=32e9)


def test_shipped_hardware():
    assert {"a100-40gb", "a100-80gb", "h100-sxm", "h200"} <= set(available_hardware())
    a100 = load_hardware("a100-40gb")
    assert a100.name == "a100-40gb" and a100.peak_flops == 312e12 and a100.hbm_bytes_per_s == 1.555e12
    assert a100.memory_bytes == int(39.59 * GIB)
    for name in available_hardware():
        hw = load_hardware(name)
        assert hw.name == name and all(v > 0 for v in (hw.peak_flops, hw.hbm_bytes_per_s, hw.memory_gib))


def test_shipped_hardware_is_package_data_of_calibrate():
    import calibrate
    assert HARDWARE_DIR == Path(calibrate.__file__).resolve().parent / "hardware_specs"
    assert load_hardware("h200") == load_hardware(HARDWARE_DIR / "h200.yaml")


def test_unknown_hardware_lists_the_available_ones():
    with pytest.raises(SpecError) as err:
        load_hardware("a100-41gb")
    assert "a100-41gb" in str(err.value) and "a100-40gb" in str(err.value) and "h100-sxm" in str(err.value)


def test_load_from_a_path(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    hw = load_hardware(path)
    assert hw.name == "my-gpu" and hw.pcie_bytes_per_s == 32e9 and isinstance(hw.peak_flops, float)


@pytest.mark.parametrize("changes,key,words", [
    (dict(peak_flops=-1.0), "peak_flops", "positive number"),
    (dict(hbm_bytes_per_s=0), "hbm_bytes_per_s", "positive number"),
    (dict(memory_gib="40GB"), "memory_gib", "positive number"),
    (dict(pcie_bytes_per_s=True), "pcie_bytes_per_s", "positive number"),
    (dict(nvlink_bytes_per_s=None), "nvlink_bytes_per_s", "missing"),
    (dict(hbm_bandwidth=2e12), "hbm_bandwidth", "unknown key"),
])
def test_bad_hardware_yaml_names_the_file_and_key(tmp_path, changes, key, words):
    raw = {k: v for k, v in {**GOOD, **changes}.items() if v is not None}
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError) as err:
        load_hardware(path)
    assert str(path) in str(err.value) and key in str(err.value) and words in str(err.value)


def test_hardware_that_is_not_a_mapping():
    with pytest.raises(SpecError, match="mapping"):
        hardware_from_dict(None, "empty.yaml")
