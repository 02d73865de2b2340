"""Hardware spec sheets and the errors a user can cause writing one."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from calibrate.hardware.hardware import (
    GIB,
    HARDWARE_DIR,
    available_hardware,
    hardware_from_dict,
    load_hardware,
)
from engine.errors import SpecError

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


@pytest.mark.parametrize("name", available_hardware())
def test_every_shipped_sheet_loads_and_names_its_source(name):
    text = (HARDWARE_DIR / f"{name}.yaml").read_text()
    assert text.startswith("# ")  # the datasheet the figures come from, before any figure
    hw = load_hardware(name)
    assert hw.name == name
    # one direction per link, dense fp16: no shipped accelerator is past these, so a slip of units shows
    assert 1e12 < hw.peak_flops < 1e16 and 1e11 < hw.hbm_bytes_per_s < 1e14
    assert 1e9 < hw.pcie_bytes_per_s <= hw.nvlink_bytes_per_s * 1.0001 or name == "gh200"
    assert 1 < hw.memory_gib < 1024


ADDED = {"a40": 149.7e12, "l4": 121e12, "a10": 125e12, "gh200": 989e12, "mi300x": 1307.4e12, "rtx-4090": 165.2e12,
         "rtx-pro-6000": 503.8e12, "rtx-pro-6000-server": 483.648e12}


@pytest.mark.parametrize("name,dense_fp16", sorted(ADDED.items()))
def test_the_added_gpus_price_a_decode_batch(name, dense_fp16):
    from calibrate.clock.roofline import RooflineCostModel
    from engine.core.batch import Batch
    from engine.specs.loader import load_model_spec

    hw = load_hardware(name)
    assert hw.peak_flops == dense_fp16  # the dense peak, not the sparse one the datasheets print first
    batch = Batch(decode_seq_ids=list(range(32)), decode_context_lens=[512] * 32)
    seconds = RooflineCostModel(load_model_spec("llama-7b"), hw).iteration_time(batch)
    assert math.isfinite(seconds) and 0 < seconds < 1.0


def test_gh200_swaps_kv_over_nvlink_c2c_not_pcie():
    from calibrate.clock.roofline import RooflineCostModel, RooflineParams, swap_copies_per_block
    from engine.specs.loader import load_model_spec

    spec = load_model_spec("llama-7b")
    gh200, h100 = load_hardware("gh200"), load_hardware("h100-sxm")
    assert gh200.peak_flops == h100.peak_flops  # the same Hopper GPU: only the host link differs
    assert gh200.pcie_bytes_per_s == 450e9 and h100.pcie_bytes_per_s == 64e9
    blocks = 64
    fast, slow = RooflineCostModel(spec, gh200).swap_time(blocks), RooflineCostModel(spec, h100).swap_time(blocks)
    assert fast < slow
    # the latency per copy is the same on both; the bytes move 450 / 64 times faster over NVLink-C2C
    latency = blocks * swap_copies_per_block(spec) * RooflineParams().swap_copy_latency_s
    assert (slow - latency) / (fast - latency) == pytest.approx(450 / 64)


def test_the_docs_name_every_shipped_sheet():
    docs = Path(__file__).resolve().parents[2] / "docs"
    config_row = next(line for line in (docs / "config.md").read_text().splitlines() if line.startswith("| `hardware`"))
    spec_table = (docs / "transfer.md").read_text().split("## The new GPUs", 1)[1]
    for name in available_hardware():
        assert f"`{name}`" in config_row, f"docs/config.md's hardware row lacks {name}"
        if not name.startswith("a100"):  # the measured chip has its own sections
            assert f"\n| {name} |" in spec_table, f"docs/transfer.md's spec table lacks {name}"


def test_a_profiled_device_is_matched_to_its_sheet_by_the_names_the_sheet_lists():
    from calibrate.hardware.hardware import available_hardware, hardware_for_device, load_hardware

    owners: dict[str, str] = {}
    for name in available_hardware():
        sheet = load_hardware(name)
        assert sheet.device_names, f"{name}: a shipped sheet names the device it is"
        for device in sheet.device_names:
            assert device not in owners, f"{device} is named by {owners.get(device)} and {name}"
            owners[device] = name
            assert hardware_for_device(device) == name
            assert hardware_for_device(f"  {device.upper()} ") == name  # case and spacing as a driver prints them
    assert hardware_for_device("NVIDIA A100-SXM4-80GB") == "a100-80gb" and hardware_for_device("NVIDIA H200") == "h200"
    assert hardware_for_device("NVIDIA H100 PCIe") == "h100-pcie"  # not the SXM part, as a substring match had it
    assert hardware_for_device("Some Future GPU") is None


def test_a_user_sheet_may_name_its_device_and_a_malformed_list_is_refused(tmp_path):
    import pytest

    from calibrate.hardware.hardware import load_hardware
    from engine.errors import SpecError

    base = ("name: mine\npeak_flops: 1.0e+14\nhbm_bytes_per_s: 1.0e+12\nmemory_gib: 16\nnvlink_bytes_per_s: 1.0e+11\n"
            "pcie_bytes_per_s: 3.0e+10\n")
    (tmp_path / "a.yaml").write_text(base)
    assert load_hardware(tmp_path / "a.yaml").device_names == ()
    (tmp_path / "b.yaml").write_text(base + "device_names: [My GPU]\n")
    assert load_hardware(tmp_path / "b.yaml").device_names == ("My GPU",)
    (tmp_path / "c.yaml").write_text(base + "device_names: My GPU\n")
    with pytest.raises(SpecError, match="device_names.*list"):
        load_hardware(tmp_path / "c.yaml")


def test_every_shipped_sheet_loads_with_its_sm_count_and_a_malformed_one_is_refused_by_name(tmp_path):
    import pytest

    from calibrate.hardware.hardware import available_hardware, load_hardware
    from engine.errors import SpecError

    counts = {name: load_hardware(name).sm_count for name in available_hardware()}
    assert counts["a100-80gb"] == counts["a100-40gb"] == 108
    assert counts["h100-sxm"] == counts["h200"] == counts["gh200"] == 132 and counts["h100-pcie"] == 114
    assert counts["b200"] is None  # no sourced count: the wave model is not used there
    base = ("name: mine\npeak_flops: 1.0e+14\nhbm_bytes_per_s: 1.0e+12\nmemory_gib: 16\nnvlink_bytes_per_s: 1.0e+11\n"
            "pcie_bytes_per_s: 3.0e+10\n")
    (tmp_path / "ok.yaml").write_text(base + "sm_count: 80\n")
    assert load_hardware(tmp_path / "ok.yaml").sm_count == 80
    for bad in ("0", "80.5", "many", "true", "[80]"):
        (tmp_path / "bad.yaml").write_text(base + f"sm_count: {bad}\n")
        with pytest.raises(SpecError, match="sm_count.*integer"):
            load_hardware(tmp_path / "bad.yaml")


def test_the_workstation_gpus_are_priced_at_their_fp32_accumulate_rates_and_found_by_their_driver_names():
    from calibrate.hardware.hardware import hardware_for_device

    # GeForce Ada accumulates FP32 at half its FP16-accumulate rate (330.3): PyTorch's GEMMs accumulate in FP32
    rtx4090, pro6000 = load_hardware("rtx-4090"), load_hardware("rtx-pro-6000")
    assert (rtx4090.peak_flops, rtx4090.peak_flops_fp8, rtx4090.sm_count) == (165.2e12, 330.3e12, 128)
    assert (rtx4090.hbm_bytes_per_s, rtx4090.pcie_bytes_per_s) == (1.008e12, 32e9)  # GDDR6X; PCIe 4.0 x16
    assert (pro6000.peak_flops, pro6000.peak_flops_fp8, pro6000.sm_count) == (503.8e12, 1007.6e12, 188)
    assert (pro6000.hbm_bytes_per_s, pro6000.pcie_bytes_per_s) == (1.792e12, 64e9)  # GDDR7; PCIe 5.0 x16
    for hw in (rtx4090, pro6000):  # no NVLink: the all-reduce crosses PCIe
        assert hw.nvlink_bytes_per_s == hw.pcie_bytes_per_s
    assert hardware_for_device("NVIDIA GeForce RTX 4090") == "rtx-4090"
    assert hardware_for_device("NVIDIA RTX PRO 6000 Blackwell Workstation Edition") == "rtx-pro-6000"
    # the Server Edition (1,597 GB/s) is another part with a sheet of its own; the 300 W Max-Q has none
    assert hardware_for_device("NVIDIA RTX PRO 6000 Blackwell Server Edition") == "rtx-pro-6000-server"
    assert hardware_for_device("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition") is None


def test_the_server_edition_is_the_workstation_edition_at_its_own_bandwidth_and_its_fp32_clock_ratio():
    # NVIDIA publishes no dense BF16 rate for the Server Edition: its sheet scales the Workstation Edition's by the
    # two editions' FP32 rates, 120 and 125 TFLOP/s, and says so
    server, workstation = load_hardware("rtx-pro-6000-server"), load_hardware("rtx-pro-6000")
    assert server.peak_flops == pytest.approx(workstation.peak_flops * 120 / 125, rel=1e-12)
    assert server.peak_flops_fp8 == pytest.approx(workstation.peak_flops_fp8 * 120 / 125, rel=1e-12)
    assert (server.hbm_bytes_per_s, server.sm_count, server.pcie_bytes_per_s) == (1.597e12, 188, 64e9)
    assert server.nvlink_bytes_per_s == server.pcie_bytes_per_s  # no NVLink: the all-reduce crosses PCIe
    assert "derived" in (HARDWARE_DIR / "rtx-pro-6000-server.yaml").read_text()


def test_the_l2_is_read_where_a_sheet_gives_it_and_a_malformed_one_is_refused_by_name(tmp_path):
    from calibrate.hardware.hardware import available_hardware
    from engine.errors import SpecError

    l2 = {name: load_hardware(name).l2_cache_bytes for name in available_hardware()}
    assert l2["rtx-4090"] == 72 * 2**20 and l2["rtx-pro-6000"] == l2["rtx-pro-6000-server"] == 128 * 2**20
    assert l2["a100-80gb"] == l2["a100-40gb"] == 40 * 2**20 and l2["h100-sxm"] == l2["h100-pcie"] == 50 * 2**20
    assert l2["b200"] is None  # no sourced figure: the L2 rules are not used there
    base = ("name: mine\npeak_flops: 1.0e+14\nhbm_bytes_per_s: 1.0e+12\nmemory_gib: 16\nnvlink_bytes_per_s: 1.0e+11\n"
            "pcie_bytes_per_s: 3.0e+10\n")
    (tmp_path / "ok.yaml").write_text(base + "l2_cache_bytes: 41943040\n")
    assert load_hardware(tmp_path / "ok.yaml").l2_cache_bytes == 40 * 2**20
    for bad in ("0", "-5", "big", "1.5"):
        (tmp_path / "bad.yaml").write_text(base + f"l2_cache_bytes: {bad}\n")
        with pytest.raises(SpecError, match="l2_cache_bytes"):
            load_hardware(tmp_path / "bad.yaml")
