"""research/paper/paper_ablation.py's machinery at a tiny scale: each variant's config is the default's with exactly
the keys it names changed (and host off keeps the device clock), a curve climbs its grid to its first crossing and reads
as the whole grid would, a grid over the bound is refused in one line, and the printed tables have a row per
variant with a value or a reason in every cell."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from calibrate.fitting.profile_file import load_profile
from engine.core.batch import BatchShape
from engine.errors import SpecError
from research.paper import paper_ablation
from research.paper.ablation_sweep import DOWN_STEPS, Ladder, check_bound
from research.paper.ablation_table import curve_frame
from research.paper.ablation_variants import (
    REMOVED,
    WHOLE_A100,
    apply_sets,
    changed_keys,
    paper_raw,
    variants,
    write_variant_files,
)
from sim.experiment.config import experiment_from_dict
from sim.experiment.run import make_cost_model
from sim.reproduce.figures import paper_config
from sim.reproduce.readings import sustainable_rate

CONFIGS = ("fig12a_sharegpt_opt13b.yaml", "fig12d_alpaca_opt13b.yaml")


@pytest.mark.parametrize("config", CONFIGS)
def test_each_variant_changes_exactly_the_keys_it_names(config, tmp_path):
    raw = paper_raw(config)
    files = write_variant_files(tmp_path)
    found = {v.name: v for v in variants(raw, files)}
    assert changed_keys(raw, apply_sets(raw, found["default"].sets)) == set()
    for v in found.values():
        assert changed_keys(raw, apply_sets(raw, v.sets)) == set(v.sets), v.name
        if v.name not in ("default", "old-default"):
            assert len(v.sets) == 1, v.name
    assert found["block-32"].sets == {"systems[4].block_size": 32}  # vLLM is the fifth system
    old = found["old-default"].sets
    assert old["cost_model.host"] is REMOVED and old["cost_model.path"].endswith("a100-80gb-linear.yaml")
    assert ("workload.dataset" in old) == (config == CONFIGS[0])  # Alpaca's stand-in has no real lengths to go back to
    assert bool(found["sharegpt-real"].skip) == (config == CONFIGS[1])


def _experiment(raw: dict):
    path = paper_config(CONFIGS[0])
    return experiment_from_dict(raw, str(path), path.parent)


def test_host_off_keeps_the_device_clock_and_charges_no_host(tmp_path):
    raw = paper_raw(CONFIGS[0])
    found = {v.name: v for v in variants(raw, write_variant_files(tmp_path))}
    default, off = (_experiment(apply_sets(raw, found[name].sets)) for name in ("default", "host-off"))
    with_host, without = (make_cost_model(exp, exp.systems[-1]) for exp in (default, off))
    for shape in (BatchShape((), (300,) * 8), BatchShape((512,), (900,) * 20), BatchShape((), (1500,) * 40)):
        assert with_host.host_time(shape) > 0 and without.host_time(shape) == 0
        assert without.device_time(shape) == pytest.approx(with_host.device_time(shape), rel=1e-12)
        assert without.iteration_time(shape) < with_host.iteration_time(shape)


def test_the_roofline_attention_profile_is_the_whole_a100_less_its_attention(tmp_path):
    whole, less = asdict(load_profile(WHOLE_A100)), asdict(load_profile(write_variant_files(tmp_path).no_attention))
    assert whole["attention"] and less["attention"] is None
    assert {k for k in whole if whole[k] != less[k]} == {"attention", "command"}


class FakeLadder(Ladder):
    """A ladder whose runs are a latency curve: no simulation."""

    def run(self, latency) -> list[float]:
        asked = []
        while rates := self.wanted():
            for rate in rates:
                asked.append(rate)
                self.points[rate] = {"normalized_latency": latency(rate), "mean_batched_requests": 1.0}
        return asked


def _ladder(grid=(1.0, 2.0, 3.0, 4.0, 5.0), must=()) -> FakeLadder:
    return FakeLadder(("x", "default", "vLLM"), None, None, grid, must)  # type: ignore[arg-type]


def _full_grid_reading(grid, latency):
    ladder = _ladder(grid)
    ladder.points = {rate: {"normalized_latency": latency(rate)} for rate in grid}
    return sustainable_rate(curve_frame(ladder))


@pytest.mark.parametrize("latency", [lambda r: 0.1 * r, lambda r: 0.2 * r, lambda r: 0.05 * r,
                                     lambda r: 0.45 if r < 3 else 0.9 - 0.1 * r])
def test_a_curve_climbs_to_its_first_crossing_and_reads_as_the_whole_grid(latency):
    ladder = _ladder()
    planned = ladder.most_left()
    asked = ladder.run(latency)
    crossing = min((r for r in ladder.grid if latency(r) >= 0.5), default=None)
    assert asked == [r for r in ladder.grid if crossing is None or r <= crossing]  # nothing past the first crossing
    assert len(asked) <= planned and ladder.most_left() == 0
    assert sustainable_rate(curve_frame(ladder)) == _full_grid_reading(ladder.grid, latency)


def test_a_curve_over_at_its_lowest_rate_halves_down_and_must_rates_run_whatever_it_does():
    ladder = _ladder(must=(4.0,))
    asked = ladder.run(lambda r: 0.4 + r / 4)  # 0.5 s/token at 0.4 req/s
    assert asked == [4.0, 1.0, 0.5, 0.25]
    reading = sustainable_rate(curve_frame(ladder))
    assert reading.is_exact and reading.low == pytest.approx(0.4)
    stuck = _ladder()
    assert stuck.run(lambda r: 9.0) == [1.0] + [1.0 / 2 ** k for k in range(1, DOWN_STEPS + 1)]
    assert sustainable_rate(curve_frame(stuck)).text() == "<= 0.12"


def test_a_grid_over_the_bound_is_refused_in_one_line(capsys):
    with pytest.raises(SpecError, match="may take up to 17 runs, over the limit of 16") as err:
        check_bound([_ladder(), _ladder(must=(9.0,))], 16)  # 5 rates and 3 halvings each, and one must rate
    assert check_bound([_ladder(), _ladder(must=(9.0,))], 17) == 17
    assert "\n" not in str(err.value)
    assert paper_ablation.main(["--max-runs", "10", "--variants", "host-off"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert paper_ablation.main(["--variants", "host-of"]) == 2
    assert "unknown variant; valid: default, host-off," in capsys.readouterr().err


def test_the_tiny_ablation_has_a_row_per_variant_and_a_value_or_a_reason_per_cell(tmp_path: Path):
    figures = (paper_ablation.AblatedFigure("12a", CONFIGS[0], "tiny 12a", 1.0, 2.0, 2.0),
               paper_ablation.AblatedFigure("12d", CONFIGS[1], "tiny 12d", 2.5, 5.0, 5.0))
    results, stats = paper_ablation.ablate(figures, ["host-off", "sharegpt-real"], 60.0, 10.0, tmp_path, jobs=1,
                                           progress=lambda line: None)
    assert stats.simulated > 0 and stats.planned >= stats.simulated + stats.shared
    lines = paper_ablation.report(results, stats, 60.0, 10.0, 1.0, 1)
    tables = _tables(lines)
    assert len(tables) == 1 + 3 * 2  # the variants, then per figure: readings, moves, crossings
    variants_rows = tables[0]
    assert [row[0] for row in variants_rows] == ["default", "host-off", "sharegpt-real"]
    for figure, (readings, moves, crossings) in zip(("12a", "12d"), (tables[1:4], tables[4:7])):
        assert [row[0].split(":")[0] for row in readings] == ["paper (Kwon et al.)", "default", "host-off",
                                                               "sharegpt-real"]
        assert [row[0].split(":")[0] for row in moves] == ["default", "host-off", "sharegpt-real"]
        for table in (readings, moves):
            assert {len(row) for row in table} == {len(table[0])}
            assert all(cell for row in table for cell in row), table
        ran = ["default", "host-off"] + (["sharegpt-real"] if figure == "12a" else [])
        assert len(crossings) == 5 * len(ran)
        skipped = [row for row in readings if row[0].startswith("sharegpt-real")][0]
        assert ("not run" in skipped[1]) == (figure == "12d")
        default = [row for row in readings if row[0] == "default"][0]
        # a reading, a bound, or a ratio of two bounds that says nothing
        assert all(cell[0].isdigit() or cell.startswith(("<=", ">=", "unknown")) for cell in default[1:]), default


def _tables(lines: list[str]) -> list[list[list[str]]]:
    """Each markdown table's body rows (header and rule dropped), as cells."""
    tables, current = [], None
    for line in lines + [""]:
        if line.startswith("|"):
            current = [] if current is None else current
            current.append([cell.strip() for cell in line.strip("|").split(" | ")])
        elif current is not None:
            tables.append(current[2:])
            current = None
    return tables
