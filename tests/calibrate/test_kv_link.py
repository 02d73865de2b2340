"""A request's KV moved between two GPUs: the link's price, its figures from the sheets and from the shipped
send/recv tables, and the errors a user can cause writing `kv_link`. Only the package's own files are read."""
from __future__ import annotations

import csv
import fnmatch
import statistics
from pathlib import Path

import pytest

from calibrate.hardware.hardware import available_hardware, load_hardware
from calibrate.parts.kv_link import SPEC_LATENCY_S, KVLink, kv_bytes, link_from_config, link_from_spec, link_from_table
from calibrate.tables.send_recv_table import (
    NETWORK_TABLES_DIR,
    PLACEMENTS,
    REQUIRED_COLUMNS,
    available_send_recv_tables,
    fit_send_recv,
)
from engine.errors import SpecError
from engine.specs.loader import model_spec_from_dict

REPO = Path(__file__).resolve().parents[2]
LLAMA_70B_LIKE = dict(name="llama-70b-like", family="llama", num_layers=80, hidden_size=8192, num_heads=64,
                      num_kv_heads=8, ffn_dim=28672, vocab_size=32000, max_seq_len=4096, norm="rmsnorm",
                      activation="silu", position="rope")


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm")


@pytest.fixture(scope="module")
def llama70b():
    return model_spec_from_dict(dict(LLAMA_70B_LIKE), "llama-70b-like.yaml")


def test_one_request_over_h100_nvlink_matches_the_hand_count(h100, llama70b):
    # K and V x 80 layers x 8 KV heads x 128 dims x 2 bytes = 327,680 bytes a token; 2,000 tokens
    assert llama70b.head_dim == 128
    assert kv_bytes(llama70b, 2000) == 2 * 80 * 8 * 128 * 2 * 2000 == 655_360_000
    link = link_from_spec(h100, "nvlink")
    assert link.bytes_per_s == 450e9  # the H100 SXM sheet's NVLink 4, one way
    assert link.transfer_s(655_360_000) == pytest.approx(8e-6 + 655_360_000 / 450e9, rel=1e-12)
    assert link.transfer_s(655_360_000) == pytest.approx(1.4644e-3, abs=1e-7)
    assert kv_bytes(llama70b, 2000, dtype_bytes=1) == 327_680_000  # an fp8 KV cache: half


def test_tensor_parallel_divides_the_bytes_term_not_the_latency(h100, llama70b):
    link = link_from_spec(h100, "pcie")
    moved = kv_bytes(llama70b, 2000)
    one, two, eight = (link.transfer_s(moved, t) - link.latency_s for t in (1, 2, 8))
    assert two == pytest.approx(one / 2) and eight == pytest.approx(one / 8)
    assert link.transfer_s(0, 4) == link.latency_s == 10e-6


def test_each_sheet_link_reads_its_own_field(h100):
    assert link_from_spec(h100, "pcie").bytes_per_s == 64e9
    assert link_from_spec(h100, "infiniband").bytes_per_s == 50e9  # ConnectX-7 NDR 400 Gb/s, one per GPU
    assert link_from_spec(load_hardware("a100-80gb"), "infiniband").bytes_per_s == 25e9  # ConnectX-6 HDR 200 Gb/s
    with_nic = {name for name in available_hardware() if load_hardware(name).infiniband_bytes_per_s is not None}
    assert with_nic == {"a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200"}


def table_rows(name: str) -> list[dict]:
    with open(NETWORK_TABLES_DIR / f"{name}.send_recv.csv", newline="") as f:
        return list(csv.DictReader(f))


def large_message_bandwidth(name: str, devices_per_node: int, from_bytes: int = 32 << 20) -> float:
    """The median of size / time over the table's messages of 32 MiB and up, read straight from its rows."""
    return statistics.median(int(r["size"]) / (float(r["time_stats.send_recv.median"]) * 1e-3)
                             for r in table_rows(name)
                             if int(r["devices_per_node"]) == devices_per_node and int(r["size"]) >= from_bytes)


@pytest.mark.parametrize("placement,devices_per_node,sheet_field", [
    ("intra_node", 2, "nvlink_bytes_per_s"), ("inter_node", 1, "infiniband_bytes_per_s")])
def test_the_measured_h100_bandwidth_is_the_large_messages_and_under_the_sheet(h100, placement, devices_per_node,
                                                                               sheet_field):
    link = link_from_config({"kind": "measured", "table": "h100_dgx", "placement": placement}, h100, "exp.yaml")
    observed = large_message_bandwidth("h100_dgx", devices_per_node)
    # size / time of a large message still carries the latency, so the fitted bandwidth is at or above it, by
    # no more than 10% (the DGX H100: 357.5 against 340.8 GB/s in one node, 35.9 against 35.3 across two)
    assert observed <= link.bytes_per_s <= 1.10 * observed
    assert link.bytes_per_s < getattr(h100, sheet_field)  # a measurement never beats the wire
    assert link.kind == "measured" and "h100_dgx" in link.source and placement in link.source


def test_the_placement_defaults_to_one_node(h100):
    assert link_from_config({"kind": "measured", "table": "h100_dgx"}, h100, "exp.yaml") == link_from_table("h100_dgx")


@pytest.mark.parametrize("table", ["a100_dgx", "h100_dgx"])
def test_the_fit_holds_on_message_sizes_it_did_not_see(table):
    limits = {"intra_node": 0.10 if table == "a100_dgx" else 0.03, "inter_node": 0.03}  # the DGX A100's pair in
    for placement in PLACEMENTS:                                                        # one node bends most
        fit = fit_send_recv(table, placement)
        assert fit.messages == 994
        assert fit.heldout_error < limits[placement] and fit.heldout_error_large < limits[placement]


def test_the_sheet_latencies_are_the_measured_ones():
    # the spec-sheet links' fixed latencies are the DGX H100 table's fits, rounded
    assert SPEC_LATENCY_S["nvlink"] == pytest.approx(fit_send_recv("h100_dgx", "intra_node").latency_s, abs=1e-6)
    assert SPEC_LATENCY_S["infiniband"] == pytest.approx(fit_send_recv("h100_dgx", "inter_node").latency_s, abs=1e-6)


def test_in_one_node_a_pair_is_faster_than_across_two():
    for table in available_send_recv_tables():
        inside, across = fit_send_recv(table, "intra_node"), fit_send_recv(table, "inter_node")
        assert inside.bytes_per_s > 5 * across.bytes_per_s and inside.latency_s < across.latency_s


def test_the_tables_ship_as_package_data_with_their_source():
    assert NETWORK_TABLES_DIR == REPO / "calibrate" / "network_tables"
    assert available_send_recv_tables() == ["a100_dgx", "h100_dgx"]
    for name in available_send_recv_tables():
        with open(NETWORK_TABLES_DIR / f"{name}.send_recv.csv", newline="") as f:
            assert tuple(next(csv.reader(f))) == REQUIRED_COLUMNS
    readme = (NETWORK_TABLES_DIR / "README.md").read_text()
    assert "microsoft/vidur" in readme and "7d47513363ec447a741ac5e47241580b47724fbf" in readme
    assert "MIT License" in (NETWORK_TABLES_DIR / "LICENSE.vidur").read_text()
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and up
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["calibrate"]
    for path in NETWORK_TABLES_DIR.iterdir():
        shipped = path.relative_to(REPO / "calibrate").as_posix()
        assert any(fnmatch.fnmatch(shipped, p) for p in patterns), f"{shipped} is not in calibrate's package-data"


@pytest.mark.parametrize("raw,hardware,key,words", [
    ("ethernet", "h100-sxm", "kv_link", "valid kinds are ['custom', 'infiniband', 'measured', 'nvlink', 'pcie']"),
    ({"kind": "ethernet"}, "h100-sxm", "kv_link.kind", "valid kinds are"),
    ({"bytes_per_s": 1e9}, "h100-sxm", "kv_link.kind", "missing"),
    ({"kind": "custom", "bytes_per_s": -2.5e10, "latency_s": 1e-5}, "h100-sxm", "kv_link.bytes_per_s",
     "positive number"),
    ({"kind": "custom", "bytes_per_s": 2.5e10, "latency_s": -1e-5}, "h100-sxm", "kv_link.latency_s",
     "non-negative number"),
    ({"kind": "custom", "bytes_per_s": 2.5e10}, "h100-sxm", "kv_link.latency_s", "missing"),
    ("custom", "h100-sxm", "kv_link", "needs a mapping"),
    ({"kind": "nvlink", "bytes_per_s": 1e9}, "h100-sxm", "kv_link.bytes_per_s", "valid keys are ['kind']"),
    ("infiniband", "l40s", "kv_link", "infiniband_bytes_per_s"),
    ({"kind": "infiniband"}, "h100-pcie", "kv_link", "calibrate/hardware_specs/h100-pcie.yaml gives none"),
    ({"kind": "measured", "table": "b200_dgx"}, "b200", "kv_link.table", "['a100_dgx', 'h100_dgx']"),
    ({"kind": "measured"}, "h100-sxm", "kv_link.table", "missing"),
    ({"kind": "measured", "table": "h100_dgx", "placement": "rack"}, "h100-sxm", "kv_link.placement",
     "['inter_node', 'intra_node']"),
    (450e9, "h100-sxm", "kv_link", "valid kinds are"),
])
def test_a_bad_kv_link_is_one_line_naming_the_key(raw, hardware, key, words):
    with pytest.raises(SpecError) as refused:
        link_from_config(raw, load_hardware(hardware), "exp.yaml")
    assert refused.value.source == "exp.yaml" and refused.value.key == key
    assert words in refused.value.message and "\n" not in str(refused.value)


def test_infiniband_on_a_sheet_without_a_nic_says_what_is_valid_there():
    with pytest.raises(SpecError) as refused:
        link_from_spec(load_hardware("l40s"), "infiniband")
    assert "valid here are ['nvlink', 'pcie'], custom or measured" in str(refused.value)


def test_a_custom_link_is_what_it_says(h100):
    link = link_from_config({"kind": "custom", "bytes_per_s": 2.5e10, "latency_s": 1e-5}, h100, "exp.yaml")
    assert link == KVLink("custom", 2.5e10, 1e-5, "custom (exp.yaml)")
    assert link.transfer_s(2_500_000_000, tensor_parallel=4) == pytest.approx(1e-5 + 0.025)


def test_a_link_refuses_impossible_figures_and_transfers():
    with pytest.raises(ValueError):
        KVLink("custom", 0.0, 1e-6, "")
    with pytest.raises(ValueError):
        KVLink("custom", 1e9, -1e-6, "")
    link = KVLink("custom", 1e9, 1e-6, "")
    for num_bytes, tp in ((-1, 1), (1, 0)):
        with pytest.raises(ValueError):
            link.transfer_s(num_bytes, tp)


def write_table(path: Path, rows: list[tuple], header=REQUIRED_COLUMNS) -> Path:
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def test_a_table_of_ones_own_is_read_by_path_and_fitted(tmp_path, h100):
    # made to lie on 10 us + size / 100 GB/s: the fit gives back both
    sizes = [2048, 4096, 1 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20]
    rows = [(s, (10e-6 + s / 100e9) * 1e3, 2, 2) for s in sizes]
    table = write_table(tmp_path / "mine.send_recv.csv", rows)
    link = link_from_config({"kind": "measured", "table": str(table)}, h100, "exp.yaml")
    assert link.bytes_per_s == pytest.approx(100e9) and link.latency_s == pytest.approx(10e-6)
    assert fit_send_recv(str(table)).heldout_error == pytest.approx(0, abs=1e-9)


def test_a_bad_table_names_its_file_and_what_is_missing(tmp_path):
    missing = write_table(tmp_path / "cols.csv", [(2048, 0.01, 2)], header=("size", "time_stats.send_recv.median",
                                                                          "num_workers"))
    with pytest.raises(SpecError) as refused:
        fit_send_recv(str(missing))
    assert refused.value.source == str(missing) and refused.value.key == "column devices_per_node"
    few = write_table(tmp_path / "few.csv", [(2048, 0.01, 2, 1), (8 << 20, 0.3, 2, 1)])
    with pytest.raises(SpecError) as refused:
        fit_send_recv(str(few), "inter_node")
    assert "too few two-GPU rows at inter_node" in str(refused.value)
    falling = write_table(tmp_path / "falling.csv", [(s, t, 2, 2) for s, t in
                                                     ((2048, 5.0), (4096, 4.0), (8 << 20, 0.2), (16 << 20, 0.1))])
    with pytest.raises(SpecError) as refused:
        fit_send_recv(str(falling))
    assert "grow with size" in str(refused.value)


def test_the_held_out_error_judges_only_the_sizes_the_fit_did_not_see(tmp_path):
    # every other size on 10 us + size / 100 GB/s, the sizes between 1.5 times slower: the fit on the first
    # lies on the line, and misses each of the others by 1/3 of its time
    sizes = [2048, 4096, 16384, 32768, 1 << 20, 2 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20]
    rows = [(s, (10e-6 + s / 100e9) * 1e3 * (1.5 if rank % 2 else 1.0), 2, 2) for rank, s in enumerate(sizes)]
    fit = fit_send_recv(str(write_table(tmp_path / "split.csv", rows)))
    assert fit.heldout_error == pytest.approx(1 / 3) and fit.heldout_error_large == pytest.approx(1 / 3)
