"""The FP8 GEMM fit: the table it reads, what it recovers from rows of known coefficients, that held-out rows never
enter it, and that the shipped fit file is what it makes of the shipped table."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import yaml

from calibrate.hardware.hardware import load_hardware
from calibrate.parts.fp8_gemm import GEMM_TABLES_DIR, H100_FP8_FIT, Fp8GemmFit, load_fp8_gemms
from engine.errors import SpecError
from research.judging.fp8_gemm_file import HELD, PRICED_KERNEL, fp8_gemm_file
from research.judging.fp8_gemm_fit import Held, fit_fp8_gemms
from research.judging.fp8_gemm_heldout import each_shape, largest_m
from research.judging.gemm_table import H100_FP8, GemmRow, kernel_rows, read_gemm_table

H100 = load_hardware("h100-sxm")
# on the fit's grids (ridge in steps of 0.002, latency of 0.2 us), so that the fit can land on them
TRUTH = Fp8GemmFit(0.71, 0.88, 0.74, 4.2e-6, quant=(3.0e-6, 0.55))
SHAPES = [(4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (12288, 5376)]
MS = [1, 16, 64, 256, 1024, 4096, 8192]


def synthetic_rows(truth: Fp8GemmFit = TRUTH) -> list[GemmRow]:
    """Rows timed exactly as `truth` prices them: every shape at every M, with and without the quantization."""
    rows = []
    for n, k in SHAPES:
        for m in MS:
            for quant in ("none", "dynamic_per_token"):
                time_s = float(truth.time(m, n, k, quant != "none", H100))
                rows.append(GemmRow("synthetic", "k", quant, m, n, k, time_s))
    return rows


def test_the_fit_recovers_known_coefficients():
    fit = fit_fp8_gemms(synthetic_rows(), H100)
    assert fit.ridge_efficiency == pytest.approx(TRUTH.ridge_efficiency, abs=1e-9)
    assert fit.gemm_latency_s == pytest.approx(TRUTH.gemm_latency_s, abs=1e-12)
    assert fit.compute_efficiency == pytest.approx(TRUTH.compute_efficiency, rel=1e-6)
    assert fit.bandwidth_efficiency == pytest.approx(TRUTH.bandwidth_efficiency, rel=1e-6)
    assert fit.quant == pytest.approx(TRUTH.quant, rel=1e-6)


def test_a_held_share_stays_and_the_rest_is_recovered_around_it():
    fit = fit_fp8_gemms(synthetic_rows(), H100, Held(0.71, 0.55))
    assert (fit.compute_efficiency, fit.quant[1]) == (0.71, 0.55)
    assert fit.bandwidth_efficiency == pytest.approx(0.88, rel=1e-6)
    assert fit.quant[0] == pytest.approx(3.0e-6, rel=1e-6)


def test_a_share_is_never_past_the_peak():
    """Rows faster than the sheet's peak bandwidth are charged the peak, not a share past 1."""
    fast = [replace(row, time_s=row.time_s * 0.5) for row in synthetic_rows(replace(TRUTH, bandwidth_efficiency=1.0))]
    assert fit_fp8_gemms(fast, H100).bandwidth_efficiency <= 1.0


def poisoned(rows: list[GemmRow], which) -> list[GemmRow]:
    return [replace(row, time_s=row.time_s * 100) if which(row) else row for row in rows]


@pytest.mark.parametrize("held", [Held(), HELD], ids=["free", "held"])
def test_rows_held_out_at_the_largest_m_never_enter_the_fit(held):
    rows = kernel_rows(read_gemm_table(H100_FP8), PRICED_KERNEL)
    fold = largest_m(rows, H100, held)
    cut = min(row.m for row in fold.rows)
    poison = largest_m(poisoned(rows, lambda row: row.m >= cut), H100, held)
    assert poison.fits == fold.fits
    assert np.array_equal(poison.predicted_s, fold.predicted_s)
    # the poison is strong enough to move a fit that reads it
    assert fit_fp8_gemms(poisoned(rows, lambda row: row.m == 1), H100, held) != fold.fits[0]


@pytest.mark.parametrize("kernel", [PRICED_KERNEL, pytest.param("cutlass_scaled_mm_blockwise", marks=pytest.mark.slow)])
def test_a_held_out_shape_never_enters_the_fit_that_predicts_it(kernel):
    rows = kernel_rows(read_gemm_table(H100_FP8), kernel)
    fold = each_shape(rows, H100, HELD)
    shapes = sorted({row.shape for row in rows})
    for index, shape in enumerate(shapes):
        poison = each_shape(poisoned(rows, lambda row, shape=shape: row.shape == shape), H100, HELD)
        assert poison.fits[index] == fold.fits[index]
        at = [i for i, row in enumerate(fold.rows) if row.shape == shape]
        assert np.array_equal(poison.predicted_s[at], fold.predicted_s[at])
        assert any(poison.fits[i] != fold.fits[i] for i in range(len(shapes)) if i != index)


def test_the_shipped_fit_is_what_the_fit_makes_of_the_shipped_table():
    shipped = yaml.safe_load(H100_FP8_FIT.read_text())
    made = fp8_gemm_file()
    assert {k: v for k, v in shipped["fit"].items() if k != "quant"} == pytest.approx(
        {k: v for k, v in made["fit"].items() if k != "quant"}, rel=1e-12)
    assert shipped["fit"]["quant"] == pytest.approx(made["fit"]["quant"], rel=1e-12)
    assert shipped["heldout"] == made["heldout"] and shipped["held"] == made["held"]
    assert {key: shipped[key] for key in ("kernel", "measured_on", "table", "rows")} == {
        key: made[key] for key in ("kernel", "measured_on", "table", "rows")}
    profile = load_fp8_gemms()
    assert profile.kernel == PRICED_KERNEL and profile.measured_on == "h100-sxm"
    for fold in profile.heldout.values():  # the figures the docs quote: under the target, under the roofline's
        assert fold["mean"] <= 0.10 and fold["mean"] < fold["roofline_mean"] and fold["p95"] < fold["roofline_p95"]


def test_the_table_holds_the_published_numbers():
    rows = read_gemm_table(H100_FP8)
    block = {(r.m, r.n, r.k): r.time_s for r in kernel_rows(rows, "cutlass_scaled_mm_blockwise")}
    assert len(block) == 16 and block[(8, 4096, 7168)] == pytest.approx(34.6e-6)
    assert block[(4096, 4096, 7168)] == pytest.approx(392.2e-6)
    per_tensor = [r for r in kernel_rows(rows, PRICED_KERNEL) if (r.m, r.n) == (256, 43008)]
    assert [r.activation_quant for r in per_tensor] == ["dynamic_per_token"]  # its noquant cell was not published
    assert per_tensor[0].time_s == pytest.approx(2 * 256 * 43008 * 5376 / 966.788837e12, rel=1e-12)
    assert (GEMM_TABLES_DIR / "README.md").read_text().count("06218c0b4dc7677fe0572fc1ae8c86824ce99e96") >= 1
    assert "Apache License" in (GEMM_TABLES_DIR / "LICENSE.vllm").read_text()


@pytest.mark.parametrize("column, value, key", [
    ("m", "0", "row 1, column m"), ("value", "fast", "row 1, column value"), ("unit", "ms", "row 1, column unit"),
    ("activation_quant", "static", "row 1, column activation_quant")])
def test_a_bad_cell_is_one_line_naming_its_row_and_column(tmp_path, column, value, key):
    header, first = H100_FP8.read_text().splitlines()[:2]
    cells = dict(zip(header.split(","), first.split(",")))
    cells[column] = value
    path = tmp_path / "t.csv"
    path.write_text(header + "\n" + ",".join(cells.values()) + "\n")
    with pytest.raises(SpecError) as err:
        read_gemm_table(path)
    assert err.value.key == key and str(path) in str(err.value) and "\n" not in str(err.value)
