"""A round-robin fleet simulated one replica at a time (sim/core/independent_replicas.py; in several processes,
sim/executors/replica_pool.py) against the fleet
simulated together behind the router's process: the same records, to the last bit, ties of an iteration's end and
an arrival included."""
from __future__ import annotations

import numpy as np
import pytest

import sim.core.simulate
from sim.core.independent_replicas import raise_first_failure, serve_replicas
from sim.core.simulate import simulate
from sim.executors.replica_pool import ProcessReplicaPool
from tests.helpers.simulation import MODEL, ROOFLINE, SYSTEMS, GridCost, grid_trace, random_trace


@pytest.fixture
def apart_calls(monkeypatch):
    """What serve_apart returned, call by call."""
    calls = []
    serve_apart = sim.core.simulate.serve_apart

    def spy(*args, **kwargs):
        fleet = serve_apart(*args, **kwargs)
        calls.append(fleet)
        return fleet

    monkeypatch.setattr(sim.core.simulate, "serve_apart", spy)
    return calls


def apart_and_together(monkeypatch, trace, system, cost=ROOFLINE, gpu_blocks=96, **kwargs):
    """The same fleet both ways; asserts the same bytes, returns the records of the default way."""
    default = simulate(trace, MODEL, system, cost, gpu_blocks, 256, rng=np.random.default_rng(0), **kwargs)
    together = simulate(trace, MODEL, system, cost, gpu_blocks, 256, rng=np.random.default_rng(0), router_process=True,
                        **kwargs)
    for frame in ("requests_frame", "iterations_frame"):
        assert getattr(default, frame)().to_csv(index=False) == getattr(together, frame)().to_csv(index=False)
    return default


@pytest.mark.parametrize("name", ["vllm", "vllm-swap", "vllm-recompute", "orca-oracle", "orca-pow2",
                                  "fastertransformer"])
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_round_robin_fleet_apart_gives_the_same_records(monkeypatch, apart_calls, name, seed, fast_forward):
    trace = random_trace(seed, count=200, rate=30.0, arrivals=("poisson", "gamma")[seed])
    apart_and_together(monkeypatch, trace, SYSTEMS[name], replicas=3, fast_forward=fast_forward)
    assert apart_calls and apart_calls[0] is not None  # it was simulated apart


def test_parallel_samples_a_shared_prefix_and_a_horizon(monkeypatch, apart_calls):
    apart_and_together(monkeypatch, random_trace(3, count=150, rate=25.0, n=3), SYSTEMS["vllm"], gpu_blocks=160,
                       replicas=2)
    apart_and_together(monkeypatch, random_trace(5, count=150, rate=25.0, prefix=40), SYSTEMS["vllm-swap"],
                       gpu_blocks=128, replicas=4)
    records = apart_and_together(monkeypatch, random_trace(7, count=150, rate=40.0), SYSTEMS["vllm"],
                                 gpu_blocks=64, replicas=2, horizon_s=4.0)
    assert records.requests_frame()["finish_s"].isna().any()  # the horizon cut requests off
    assert len(apart_calls) == 3 and all(fleet is not None for fleet in apart_calls)


@pytest.mark.parametrize("replicas", [2, 3])
@pytest.mark.parametrize("fast_forward", [True, False])
def test_an_iteration_ending_as_a_request_arrives_is_ordered_as_together(monkeypatch, apart_calls, replicas,
                                                                         fast_forward):
    for seed in (8, 9):
        records = apart_and_together(monkeypatch, grid_trace(seed), SYSTEMS["vllm"], GridCost(), replicas=replicas,
                                     fast_forward=fast_forward)
        ends = set(records.iterations_frame().eval("start_s + duration_s"))
        assert len(ends & set(records.requests_frame()["arrival_s"])) > 20  # ties, many
    assert len(apart_calls) == 2  # both served apart


def test_only_a_round_robin_fleet_or_one_replica_goes_apart(monkeypatch, apart_calls):
    apart_and_together(monkeypatch, random_trace(1, count=100, rate=20.0), SYSTEMS["vllm"], replicas=3,
                       router="least_outstanding")
    assert apart_calls == []
    apart_and_together(monkeypatch, random_trace(1, count=100, rate=20.0), SYSTEMS["vllm"], replicas=1)
    assert len(apart_calls) == 1


def test_beam_searches_draw_from_one_generator_together(monkeypatch, apart_calls):
    apart_and_together(monkeypatch, random_trace(10, count=120, rate=20.0, beams=2), SYSTEMS["vllm"],
                       gpu_blocks=160, replicas=3)
    assert apart_calls == []


def test_a_lone_replica_with_beam_searches_goes_apart_and_leaves_the_generator_as_together(monkeypatch,
                                                                                         apart_calls):
    trace = random_trace(10, count=120, rate=20.0, beams=2)
    rngs = [np.random.default_rng(0) for _ in range(2)]
    runs = [simulate(trace, MODEL, SYSTEMS["vllm"], ROOFLINE, 160, 256, rng=rng, router_process=together)
            for rng, together in zip(rngs, (False, True))]
    for frame in ("requests_frame", "iterations_frame"):
        assert getattr(runs[0], frame)().to_csv(index=False) == getattr(runs[1], frame)().to_csv(index=False)
    assert len(apart_calls) == 1 and rngs[0].random() == rngs[1].random()  # both settled where they drew


def test_the_collector_freeze_is_undone_and_leaves_anothers_alone():
    import gc

    trace = random_trace(2, count=40)
    simulate(trace, MODEL, SYSTEMS["vllm"], ROOFLINE, 96, 256)
    assert gc.get_freeze_count() == 0  # what the simulation froze is back with the collector
    kept = [object()]  # a process that froze its own objects (a pre-fork server) keeps them frozen
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        simulate(trace, MODEL, SYSTEMS["vllm"], ROOFLINE, 96, 256)
        assert gc.get_freeze_count() == frozen and kept
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("jobs", [2, 3])
def test_replicas_served_in_other_processes_give_the_same_records(monkeypatch, apart_calls, jobs):
    trace = random_trace(4, count=200, rate=30.0)
    apart_and_together(monkeypatch, trace, SYSTEMS["vllm"], replicas=4, replica_pool=ProcessReplicaPool(jobs))
    assert apart_calls and apart_calls[0] is not None and [run.index for run in apart_calls[0]] == [0, 1, 2, 3]


def test_a_fleet_goes_to_the_pool_passed_in_and_a_lone_replica_stays_here():
    class InThisProcess:
        """A pool that serves the fleets it is handed here, as its workers would, and notes their sizes."""

        def __init__(self):
            self.fleets = []

        def serve(self, trace, wakes, fleet):
            self.fleets.append(fleet.replicas)
            return raise_first_failure(serve_replicas(trace, wakes, fleet, range(fleet.replicas)))

    pool, trace = InThisProcess(), random_trace(4, count=60, rate=20.0)
    for replicas in (3, 1):
        simulate(trace, MODEL, SYSTEMS["vllm"], ROOFLINE, 96, 256, replicas=replicas, replica_pool=pool)
    assert pool.fleets == [3]


def test_a_replica_pool_of_fewer_than_two_processes_is_refused():
    for jobs in (1, 0):
        with pytest.raises(ValueError, match=f"of {jobs} processes: it needs at least 2"):
            ProcessReplicaPool(jobs)


def test_replicas_in_other_processes_hand_their_records_over_in_files_removed_after(monkeypatch, tmp_path):
    """Workers write each replica's records to a file; the merge reads the columns from there, and the files go
    once the runs are let go of (on an error or a tie at once)."""
    import gc
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []
    merged_records = sim.core.simulate.merged_records

    def spy(runs):
        seen.append([(run.stored is not None, len(run.records.iteration_columns[0]), run.num_iterations)
                     for run in runs])
        assert list(tmp_path.glob("servesim-replicas-*/replica-*.bin"))
        return merged_records(runs)

    monkeypatch.setattr(sim.core.simulate, "merged_records", spy)
    records = simulate(random_trace(4, count=120, rate=30.0), MODEL, SYSTEMS["vllm"], ROOFLINE, 96, 256,
                       rng=np.random.default_rng(0), replicas=3, replica_pool=ProcessReplicaPool(2))
    # every replica's columns came from its file, not the pool's pipe
    assert len(seen[0]) == 3 and all(stored and held == 0 and count > 0 for stored, held, count in seen[0])
    assert len(records.iteration_columns[0]) == sum(count for _, _, count in seen[0])
    gc.collect()
    assert not list(tmp_path.iterdir())


def test_arrival_ties_in_other_processes_are_ordered_as_together(monkeypatch, apart_calls):
    apart_and_together(monkeypatch, grid_trace(8), SYSTEMS["vllm"], GridCost(), replicas=2,
                       replica_pool=ProcessReplicaPool(2))
    assert apart_calls and apart_calls[0] is not None


def test_a_sweep_gives_its_idle_processes_to_a_fleets_replicas(write_config, small, tmp_path):
    from sim.executors.pool import PoolWorkers
    from sim.executors.workers import Workers
    from sim.experiment.config import load_experiment
    from sim.experiment.sweep import replica_jobs, sweep

    pool = PoolWorkers.__new__(PoolWorkers)  # its attributes, without starting processes
    pool.width, pool.nests_processes = 4, True
    assert [replica_jobs(pool, runs, 8) for runs in (1, 2, 3, 4, 9)] == [4, 2, 1, 1, 1]
    assert replica_jobs(pool, 1, 1) == 1 and replica_jobs(Workers(), 1, 8) == 1
    fleet = small.replace("systems: [fastertransformer, orca-max, orca-pow2, orca-oracle, vllm]",
                          "systems: [vllm]\nreplicas: 3\nrouter: round_robin").replace("rates: [0.5]", "rates: [1.5]")
    exp = load_experiment(write_config(fleet))
    alone = sweep(exp, tmp_path / "one", jobs=1, progress=lambda line: None)
    shared = sweep(exp, tmp_path / "two", jobs=2, progress=lambda line: None)  # its one run: 2 processes
    assert alone.to_csv(index=False) == shared.to_csv(index=False)
    run = next((tmp_path / "one" / "runs").iterdir()).name
    for name in ("requests.csv.gz", "iterations.parquet"):
        one, two = (tmp_path / out / "runs" / run / name for out in ("one", "two"))
        assert one.read_bytes() == two.read_bytes()


@pytest.fixture
def together_calls(monkeypatch):
    """Each time the fleet was simulated together."""
    calls = []
    serve_together = sim.core.simulate.serve_together

    def spy(*args, **kwargs):
        calls.append(1)
        return serve_together(*args, **kwargs)

    monkeypatch.setattr(sim.core.simulate, "serve_together", spy)
    return calls


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_error_apart_is_the_error_the_shared_simulation_meets_first(monkeypatch, together_calls, jobs):
    from engine.errors import SpecError
    from tests.helpers.simulation import NanAfter

    messages = []
    for together in (False, True):
        with pytest.raises(SpecError) as err:
            simulate(random_trace(1, count=60, rate=10.0), MODEL, SYSTEMS["vllm"], NanAfter(), 96, 256,
                     replicas=3, replica_pool=ProcessReplicaPool(jobs) if jobs > 1 else None,
                     router_process=together)
        messages.append(str(err.value))
        # apart raised it without simulating the fleet again; together is the one simulation
        assert len(together_calls) == int(together)
    assert messages[0] == messages[1] and "nan" in messages[0]


def test_a_broken_apart_path_fails_instead_of_falling_back(monkeypatch, together_calls):
    import sim.core.independent_replicas
    from sim.core.known_arrivals import KnownArrivals

    class Broken(KnownArrivals):  # a subclass: compiled, KnownArrivals' own methods cannot be patched
        def idle(self, core, now_s):
            raise RuntimeError("a bug only the apart path runs")

    monkeypatch.setattr(sim.core.independent_replicas, "KnownArrivals", Broken)
    with pytest.raises(RuntimeError, match="a bug only the apart path runs"):
        simulate(random_trace(1, count=60, rate=10.0), MODEL, SYSTEMS["vllm"], ROOFLINE, 96, 256, replicas=3)
    assert together_calls == []
