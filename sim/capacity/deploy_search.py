"""`servesim plan`'s search: the cheapest fleet that serves a total rate under a joint SLO, and why every other
deployment is not it.

Each deployment (sim/capacity/candidates.py) that can run gets one rate search, `servesim capacity`'s (the highest rate
one replica, or one prefill:decode unit, holds under every target at once); the rate then needs ceil(total / that)
of them, and the fleet costs their GPUs times the GPU's price an hour. Behind a round-robin router each replica of
such a fleet sees every n-th arrival, steadier than the Poisson stream the search probed at the same mean: the
search's answer is the conservative one.

Most deployments are never simulated, and each says why:

- the config's checks refuse it (weights and a longest request's KV do not fit, heads not divided, batch limits);
- its TPOT target is under the clock's fastest decode step (sim/capacity/bound.py): missed at any rate;
- its cost is bounded below by the roofline's most requests a second a replica could hold (bound.py), and that bound
  is already over the cheapest fleet found (plus `keep_within`), so it cannot rank;
- a search stops as soon as a probe over the SLO at rate r says the answer is under r, so that the fleet needs more
  replicas than the cheapest found can beat.

The deployments are searched cheapest bound first, so that a cheap fleet is found early and prunes the rest. Each
decision looks only at the deployments before it in that order: on any number of workers (a batch of searches at
once, each deciding after the batch as one at a time would have) and after any interruption (the probes are kept:
sim/capacity/probe_store.py) the tables are the same.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

from sim.capacity import probe_store
from sim.capacity.bound import decode_tokens_per_request, roofline
from sim.capacity.candidates import Built, build, candidates, label
from sim.capacity.deploy_config import DeploymentSearch
from sim.capacity.prices import Price
from sim.capacity.search import Point, Probe, job, rate_ceiling, rate_search, run_jobs
from sim.capacity.targets import judge, not_served, unmeasured
from sim.executors.workers import Workers
from sim.experiment.progress import Eta

RANKED = "ranked"


@dataclass
class Outcome:
    """What the search made of one deployment: ranked (it meets the SLO; its fleet and cost), or the stage that
    rejected it and why. `usd_per_hour` of a rejected one is the least its fleet could cost, where known."""
    built: Built
    price: Price
    stage: str
    reason: str = ""
    rate: float = math.nan  # req/s one replica (or unit) holds
    units: int | None = None
    usd_per_hour: float = math.nan
    path: list[Probe] = field(default_factory=list)
    bound_rps: float = math.nan  # the roofline's most a unit could be found to hold (bound.py), where it was asked
    clock: str = ""  # the cost model's label, where the deployment was built


@dataclass
class Prepared:
    """A deployment ready to search: its bound, where its search starts, and the probes already made of it."""
    built: Built
    price: Price
    bound_rps: float  # the most a unit can be found to hold (inf: no bound)
    start: float
    digest: str  # of what its probes depend on ("" until asked: probe_store.digest)
    known: dict[Point, Probe]
    total: float  # the rate the fleet serves, req/s
    clock: str  # the cost model's label

    def fingerprint(self, seed: int) -> None:
        if not self.digest:
            b = self.built
            assert b.exp is not None and b.system is not None
            self.digest = probe_store.digest(b.exp, b.system, seed, b.candidate.fleet)

    @property
    def least_usd(self) -> float:
        return self.usd(self.units(self.bound_rps))

    def units(self, rate: float) -> float:
        """Units for the total rate if one held `rate`."""
        return math.ceil(self.total / rate) if rate > 0 else math.inf

    def usd(self, units: float) -> float:
        """A fleet of `units` units, an hour."""
        return units * self.built.candidate.gpus_a_unit * self.price.usd_per_gpu_hour

    def usd_under(self, rate: float) -> float:
        """The least a fleet costs whose unit holds less than `rate`."""
        return self.usd(fewest_units(self.total, rate))


@dataclass(frozen=True)
class Cut:
    """A search stopped at a probe over the SLO whose rate already prices the fleet over the cutoff."""
    rate: float


def search_deployments(search: DeploymentSearch, out_dir, workers: Workers | None = None,
                       progress: Callable[[str], object] = print) -> list[Outcome]:
    """Every deployment of the search space, decided; in the space's order."""
    workers = workers or Workers()
    built = [build(search, c) for c in candidates(search)]
    outcomes: dict[int, Outcome] = {}
    ready = []
    tokens = decode_tokens_per_request(search.base, min(search.rate, rate_ceiling(search.base)), search.seed)
    for b in built:
        price = search.prices.of(b.candidate.hardware, "plan.hardware")
        if b.exp is None:
            outcomes[b.candidate.index] = Outcome(b, price, b.stage, b.reason)
            continue
        prepared, refused = _prepare(search, b, price, tokens, out_dir)
        if refused is not None:
            outcomes[b.candidate.index] = refused
        else:
            ready.append(prepared)
    ready.sort(key=lambda p: (p.least_usd, p.built.candidate.index))
    resumed = sum(len(p.known) for p in ready)
    if resumed:
        progress(f"resuming: {resumed} probes of {sum(bool(p.known) for p in ready)} deployments already made in "
                 f"{out_dir}/{probe_store.FOLDER}")
    progress(f"{len(built)} deployments: {len(built) - len(ready)} refused without a probe, {len(ready)} to search, "
             "cheapest bound first")
    for outcome in _decide_in_order(search, ready, workers, out_dir, progress):
        outcomes[outcome.built.candidate.index] = outcome
    return [outcomes[i] for i in sorted(outcomes)]


def _prepare(search: DeploymentSearch, b: Built, price: Price, tokens: float, out_dir
             ) -> tuple[Prepared, Outcome | None]:
    """A deployment's bound and start; or its rejection, where the clock alone rules it out."""
    assert b.exp is not None and b.system is not None
    unit = b.candidate.split
    replica = roofline(dataclasses.replace(b.exp, split=None), b.system)
    bound = replica.rate_bound(tokens) * (1 if unit is None else unit[1])  # a unit's decode replicas emit its tokens
    start = min(2.0 ** math.floor(math.log2(bound / 4)) if math.isfinite(bound) else min(b.exp.rates),
                rate_ceiling(b.exp))
    prepared = Prepared(b, price, bound, start, "", {}, search.rate, replica.clock)
    if probe_store.kept(out_dir, b.candidate.slug):  # a digest costs a YAML dump: only where there is one to match
        prepared.fingerprint(search.seed)
        prepared.known.update(probe_store.load(out_dir, b.candidate.slug, prepared.digest))
    for target in search.targets:
        if target.metric.startswith("tpot") and replica.fastest_step_s > target.limit:
            return prepared, Outcome(b, price, "tpot", (
                f"every TPOT is at least {replica.fastest_step_s * 1e3:.3g} ms, the clock's fastest decode step (one "
                f"sequence), over {target}: missed at any rate"), bound_rps=bound, clock=replica.clock)
    if prepared.units(bound) > search.max_replicas:
        return prepared, Outcome(b, price, "replicas", (
            f"needs at least {prepared.units(bound):.0f} replicas for {search.rate:g} req/s (the roofline's most is "
            f"{bound:.3g} req/s a {_unit(b)}), more than plan.max_replicas {search.max_replicas}"),
            usd_per_hour=prepared.least_usd, bound_rps=bound, clock=replica.clock)
    return prepared, None


def _decide_in_order(search: DeploymentSearch, ready: list[Prepared], workers: Workers, out_dir,
                     progress: Callable[[str], object]):
    """Each deployment decided in `ready`'s order, a batch of searches (one a worker) at a time."""
    eta = Eta()
    eta.expect(len(ready), 1.0)
    best = math.inf
    position = 0
    while position < len(ready):
        batch: list[Prepared] = []
        while position < len(ready) and len(batch) < workers.width:
            prepared = ready[position]
            position += 1
            if prepared.least_usd > _cutoff(search, best):  # every later one's bound is at least as high
                outcome = _bounded(search, prepared, best)
                outcome.bound_rps, outcome.clock = prepared.bound_rps, prepared.clock
                progress(f"  {eta.finished(1.0):<19} {label(prepared.built)}: {outcome.reason}")
                yield outcome
                continue
            batch.append(prepared)
        cutoff = _cutoff(search, best)
        for prepared in batch:
            prepared.fingerprint(search.seed)
        jobs = [job(p.built.exp, p.built.system, search.targets, search.seed, _search(search, p, cutoff), p.known)
                for p in batch]
        run_jobs(jobs, workers, _keeper(out_dir, batch))
        for prepared, done in zip(batch, jobs):
            path = [done.known[point] for point in done.path]
            outcome = _decided(search, prepared, path, done.result, best)
            outcome.bound_rps, outcome.clock = prepared.bound_rps, prepared.clock
            if outcome.stage == RANKED:
                best = min(best, outcome.usd_per_hour)
            progress(f"  {eta.finished(1.0):<19} {label(prepared.built)}: {_said(outcome)}")
            yield outcome


def _keeper(out_dir, batch: list[Prepared]) -> Callable[[int, Probe], None]:
    """Each search's probes saved as its path takes one (the probes it looked ahead at with them)."""
    return lambda i, probe: probe_store.save(out_dir, batch[i].built.candidate.slug, batch[i].digest, batch[i].known)


def _search(search: DeploymentSearch, prepared: Prepared, cutoff: float
            ) -> Callable[[], Generator[Point, bool | None, float | Cut]]:
    exp = prepared.built.exp
    assert exp is not None
    return lambda: capped(rate_search(prepared.start, search.tolerance, 1, rate_ceiling(exp)), search.rate,
                          prepared.usd_under, cutoff)


def capped(search: Generator[Point, bool | None, float], total: float, usd_under: Callable[[float], float],
           cutoff: float) -> Generator[Point, bool | None, float | Cut]:
    """`search` (a rate search of one unit), stopped where going on cannot change the fleet: at the first probe over
    the SLO at a rate that already prices the fleet over `cutoff` (a Cut: the answer is under any rate over the SLO,
    so the fleet costs at least usd_under(that rate)), or, returning the highest rate held, once every rate from it
    to the lowest over the SLO needs as many units for `total` (bisecting on would change the rate, not the
    fleet)."""
    low, high = 0.0, math.inf
    try:
        point = next(search)
        while True:
            held = yield point
            if held:
                low = max(low, point[0])
            elif held is False:
                high = min(high, point[0])
                if usd_under(point[0]) > cutoff:
                    return Cut(point[0])
            if low > 0 and fewest_units(total, high) >= math.ceil(total / low):
                return low
            point = search.send(held)
    except StopIteration as end:
        return end.value


def fewest_units(total: float, over: float) -> int:
    """The fewest units any rate under `over` needs for `total` (inf: one)."""
    return math.floor(total / over) + 1


def _cutoff(search: DeploymentSearch, best: float) -> float:
    return best * (1 + search.keep_within)


def _decided(search: DeploymentSearch, prepared: Prepared, path: list[Probe], result, best: float) -> Outcome:
    """The outcome one search at a time would have given, whatever the batch: against the cheapest fleet found
    before this deployment, not the one its batch started with."""
    if prepared.least_usd > _cutoff(search, best):
        return _bounded(search, prepared, best)
    b, price = prepared.built, prepared.price
    for p in path:
        if judge(p.summary, search.targets).held is False and prepared.usd_under(p.rate) > _cutoff(search, best):
            return Outcome(b, price, "cut", (
                f"over the SLO at {p.rate:.4g} req/s a {_unit(b)} ({judge(p.summary, search.targets).why}), so "
                f"at least {fewest_units(search.rate, p.rate)} for {search.rate:g} req/s: at least "
                f"${prepared.usd_under(p.rate):,.2f}/h, {_over(search, best)}"),
                usd_per_hour=prepared.usd_under(p.rate), path=path)
    assert not isinstance(result, Cut), "a cut under a higher cutoff is a cut under this one"
    if result == 0.0:
        return _missed(search, prepared, path)
    units = prepared.units(result)
    outcome = Outcome(b, price, RANKED, rate=result, units=int(units), usd_per_hour=prepared.usd(units), path=path)
    if units > search.max_replicas:
        outcome.stage = "replicas"
        outcome.reason = (f"holds {result:.4g} req/s a {_unit(b)}: {units:.0f} for {search.rate:g} req/s, more than "
                          f"plan.max_replicas {search.max_replicas}")
    return outcome


def _bounded(search: DeploymentSearch, prepared: Prepared, best: float) -> Outcome:
    b = prepared.built
    return Outcome(b, prepared.price, "bound", (
        f"at least ${prepared.least_usd:,.2f}/h ({prepared.units(prepared.bound_rps):.0f} at the roofline's most "
        f"{prepared.bound_rps:.3g} req/s a {_unit(b)}), {_over(search, best)}"), usd_per_hour=prepared.least_usd)


def _missed(search: DeploymentSearch, prepared: Prepared, path: list[Probe]) -> Outcome:
    """No rate held: nothing measured, the server fell behind even at the lowest rate, or the SLO was missed."""
    b, price = prepared.built, prepared.price
    measured = [p for p in path if judge(p.summary, search.targets).held is not None]
    if not measured:
        return Outcome(b, price, "unmeasured", (
            f"no probe measured the targets up to {max(p.rate for p in path):.4g} req/s "
            f"({unmeasured([t.metric for t in search.targets])}): lower warmup_s or raise workload.duration_s"),
            path=path)
    lowest = min(measured, key=lambda p: p.rate)
    why = judge(lowest.summary, search.targets).why
    if not_served(lowest.summary):
        return Outcome(b, price, "saturated",
                       f"falls behind even at {lowest.rate:.4g} req/s, the lowest probed ({why})", path=path)
    return Outcome(b, price, "slo", f"misses the SLO at every rate down to {lowest.rate:.4g} req/s ({why})", path=path)


def _over(search: DeploymentSearch, best: float) -> str:
    keep = f" + {search.keep_within:.0%}" if search.keep_within else ""
    return f"over the cheapest fleet found (${best:,.2f}/h{keep})"


def _unit(b: Built) -> str:
    return "replica" if b.candidate.split is None else f"{b.candidate.fleet} unit"


def _said(outcome: Outcome) -> str:
    if outcome.stage != RANKED:
        return outcome.reason
    return (f"{outcome.rate:.4g} req/s a {_unit(outcome.built)}, {outcome.units} for the rate: "
            f"${outcome.usd_per_hour:,.2f}/h")
