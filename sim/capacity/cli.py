"""`servesim capacity`: what rate holds my latency target, and how many replicas I need, or what concurrency;
`servesim plan`: the cheapest fleet that serves a rate under a joint SLO."""
from __future__ import annotations

from pathlib import Path

from sim.executors.options import add_executor_options, executor_spec


def _cmd_capacity(args) -> int:
    import dataclasses

    import pandas as pd

    from sim.capacity.plan import FLAGS, capacity_frame, colocated, plan_capacity, probe_runs, run_capacity
    from sim.capacity.split import check_split_search, check_splits, header, split_capacity
    from sim.experiment.config import load_experiment
    from sim.experiment.output import prepare_out_dir, write_csv, write_text
    from sim.experiment.setup import resolved_yaml

    exp = load_experiment(args.config, args.set)
    if args.concurrency:
        return _concurrency_capacity(args, exp)
    plan = plan_capacity(exp, args.target, args.rate, args.seed, 0.05 if args.tolerance is None else args.tolerance,
                         FLAGS)
    splits = None if args.splits is None else check_splits(args.splits, "--splits")
    if splits is not None:
        check_split_search(exp, splits)
    searched = colocated(exp, splits is not None, "give --splits N to search its prefill:decode splits")
    executor = executor_spec(args, runs=probe_runs(exp))
    out_dir = prepare_out_dir(Path(args.out or Path("results") / exp.name))
    with executor.open() as workers:
        result = run_capacity(dataclasses.replace(plan, exp=searched), workers, print)
    for line in result.notes:
        print(line)
    for label in dict.fromkeys(row["cost_model"] for row in result.rows):
        print(f"priced by: {label} (cost_models.txt says how)")
    table = capacity_frame(result.rows)
    print(table.to_string(index=False))
    tables = {"capacity.csv": table, "capacity_probes.csv": pd.DataFrame(result.probes)}
    if splits is not None:
        print(header(splits))
        with executor.open() as workers:
            tables["capacity_split.csv"] = pd.DataFrame(split_capacity(plan, splits, workers, print))
        print(tables["capacity_split.csv"].to_string(index=False))
    for name, frame in tables.items():  # once every search is done: an error or a kill leaves no half set
        write_csv(frame, out_dir / name)
    write_text(result.cost_models, out_dir / "cost_models.txt")
    write_text(resolved_yaml(exp.raw, args.config, args.set), out_dir / "resolved.yaml")
    stale = out_dir / "capacity_split.csv"
    if splits is None and stale.is_file():  # an earlier search's splits, which this one did not make
        stale.unlink()
    print(f"wrote {out_dir}/" + ", ".join([*tables, "cost_models.txt", "resolved.yaml"]))
    return 0


def _cmd_plan(args) -> int:
    import time

    from engine.specs.arguments import Spelling
    from sim.capacity.deploy_run import plan_arguments, run_plan

    started = time.perf_counter()
    checked = plan_arguments(args.config, args.set, args.out, lambda runs: executor_spec(args, runs),
                             Spelling(overrides="--set", out_dir="--out", config="config"))
    result = run_plan(checked, print)
    if len(result.ranked):
        shown = ["rank", "replicas", "hardware", "tensor_parallel", "precision", "fleet", "max_num_seqs",
                 "max_num_batched_tokens", "usd_per_hour", "usd_per_million_output_tokens", "rate_per_replica_rps",
                 *(t.metric for t in checked.search.targets)]
        print(result.ranked[shown].to_string(index=False))
    print(f"wrote {checked.out_dir}/" + ", ".join(result.files) + f" in {time.perf_counter() - started:.1f} s")
    return 0


def _concurrency_capacity(args, exp) -> int:
    """--concurrency: the highest max_concurrency that meets the targets (sim/capacity/concurrency.py), written
    beside capacity.csv's rate answers as capacity_concurrency.csv and its probes."""
    import pandas as pd

    from engine.errors import SpecError
    from sim.capacity.concurrency import concurrency_frame, plan_concurrency, run_concurrency
    from sim.capacity.plan import FLAGS
    from sim.experiment.output import prepare_out_dir, write_csv, write_text

    for flag, value in (("--rate", args.rate), ("--splits", args.splits), ("--tolerance", args.tolerance)):
        if value is not None:  # a rate search's: a search over concurrency has no use for it
            raise SpecError(flag, "", "is a rate search's; a search over concurrency (--concurrency) runs at rate "
                            "inf and ends on adjacent whole numbers: leave it out")
    plan = plan_concurrency(exp, args.target, args.seed, FLAGS)
    executor = executor_spec(args, runs=len(exp.systems) * 8)
    out_dir = prepare_out_dir(Path(args.out or Path("results") / exp.name))
    with executor.open() as workers:
        result = run_concurrency(plan, workers, print)
    for line in result.notes:
        print(line)
    table = concurrency_frame(result.rows)
    print(table.to_string(index=False))
    tables = {"capacity_concurrency.csv": table, "capacity_concurrency_probes.csv": pd.DataFrame(result.probes)}
    for name, frame in tables.items():  # once every search is done: an error or a kill leaves no half set
        write_csv(frame, out_dir / name)
    write_text(result.cost_models, out_dir / "cost_models.txt")
    print(f"wrote {out_dir}/" + ", ".join([*tables, "cost_models.txt"]))
    return 0


def register(sub) -> None:
    plan = sub.add_parser("plan", help="the cheapest fleet (GPU, parallelism, formats, batch limits, replicas) that "
                          "serves a rate under a joint SLO, and why every other deployment is not it")
    plan.add_argument("config", help="a plan config: an experiment with a plan: section, e.g. "
                      "configs/examples/plan_llama3_70b.yaml")
    plan.add_argument("--out", help="output folder (default results/<name>); a plan run again there resumes")
    plan.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="override a config key, e.g. --set plan.rate=20 --set workload.duration_s=300")
    add_executor_options(plan, "searches")
    plan.set_defaults(func=_cmd_plan)

    cap = sub.add_parser("capacity", help="highest rate meeting a latency target; replicas for a rate")
    cap.add_argument("config")
    cap.add_argument("--target", required=True, action="append",
                     help="METRIC=LIMIT, e.g. normalized_latency=0.1; repeat it (or give a comma list) for a joint "
                     "target: each target's rate and the rate that meets them all")
    cap.add_argument("--rate", type=float, help="also find replicas needed for this total rate (req/s)")
    cap.add_argument("--seed", type=int, default=0)
    cap.add_argument("--splits", type=int, metavar="N",
                     help="also search every prefill:decode split of at most N replicas in all (disaggregated "
                     "serving, docs/disaggregated.md) for the most goodput per GPU, beside the colocated replica")
    cap.add_argument("--tolerance", type=float, default=None, help="relative precision of the rate search "
                     "(default 0.05)")
    cap.add_argument("--concurrency", action="store_true",
                     help="search the highest max_concurrency instead (rate inf: that many requests in flight, each "
                     "sent as another finishes, vLLM's bench serve --max-concurrency) that meets the targets, given as "
                     "the concurrency and the request rate it serves: capacity_concurrency.csv; needs "
                     "workload.num_requests")
    cap.add_argument("--out")
    cap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    add_executor_options(cap, "probes")
    cap.set_defaults(func=_cmd_capacity)
