"""One engine of a split fleet (engine/runtime/split_engine.py): its control plane over its own KV cache, the
token ids of its sequences, and the iteration it runs on the fleet's clock.

An iteration is started and ended apart, as the simulator's replica does around its timeout: start() schedules
a batch and runs its forward now (what the batch reads is in place: a decode reads KV copied in before
kv_arrived), and the clock learns when it ends; end() completes it at that time. A speculating engine (the decode
engine, proposing by n-gram lookup: split_engine.check_split_speculation) verifies each decode's proposals in that
forward, as the colocated engine does, and end() keeps those the target kept.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.core.factory import make_scheduler
from engine.core.sequence import SequenceGroup
from engine.core.serving import ServingCore, Step
from engine.runtime.engine import Engine
from engine.runtime.sampler import SamplingParams
from engine.runtime.speculation import ngram_proposals


@dataclass
class EngineSide:
    """An engine's part of a split run: `index` is its replica number in the records (prefill 0, decode 1)."""

    engine: Engine
    core: ServingCore
    sampling: SamplingParams
    tokens: dict[int, list[int]] = field(default_factory=dict)  # seq_id -> prompt + generated
    step: Step | None = None  # the iteration running now
    sampled: dict[int, int] = field(default_factory=dict)  # what it sampled
    end_s: float = 0.0  # when it ends
    woken: bool = False  # a start is pending on the clock (SimPy's wake: one at a time)
    times: list[float] = field(default_factory=list)  # each iteration's seconds, in order
    proposals: dict[int, list[int]] = field(default_factory=dict)  # the running iteration's, by sequence

    @classmethod
    def of(cls, engine: Engine, index: int, sampling: SamplingParams) -> EngineSide:
        if engine.runner is None:
            raise ValueError("a split fleet's engines run the model: build them with run_model=True")
        if engine.clock != "forward":
            raise ValueError("a split fleet's engines run on the forward clock (or a time_fn), not clock='step'")
        engine.runner.reset_sampler(engine.seed)  # each run samples the same way
        scheduler = make_scheduler(engine.system, engine.spec, engine.num_gpu_blocks, engine.num_cpu_blocks)
        core = ServingCore(scheduler, replica=index)
        core.records.speculating = engine.system.speculative is not None  # proposed and accepted, per request
        return cls(engine, core, sampling)

    def start(self, now_s: float) -> bool:
        """Schedule and run the next iteration from now_s; False when nothing can run (then it waits to be
        woken). A schedule() that only preempted schedules again at once, as the engine's loop does."""
        while True:
            step = self.core.start_step(now_s)
            if step is not None:
                break
            self._apply_plans_only(self.core.idle_batch)
            if not self.core.idle_preempted:
                return False
        runner, batch = self.engine.runner, step.batch
        self.proposals = ngram_proposals(batch, self.tokens, {}) if any(batch.decode_proposed) else {}
        extra = {"proposals": self.proposals} if self.proposals else {}
        self.sampled, measured = runner.execute(batch, self.tokens, self.core.scheduler.block_table, self.sampling,
                                                **extra)
        seconds = self.engine.time_fn(batch) if self.engine.time_fn is not None else measured
        self.step, self.end_s = step, now_s + seconds
        self.times.append(seconds)
        return True

    def end(self) -> list[SequenceGroup]:
        """The running iteration ends (at end_s): its kept proposals and sampled tokens appended, its completions
        and records."""
        step, accepted = self.step, None
        if self.proposals:  # each decode's proposals the verify kept come before its own sampled token
            kept = self.engine.runner.last_accepted
            for seq_id, proposal in self.proposals.items():
                self.tokens[seq_id].extend(proposal[:kept[seq_id]])
            accepted = [kept.get(seq_id, 0) for seq_id in step.batch.decode_seq_ids]
        for seq_id, token in self.sampled.items():
            self.tokens[seq_id].append(token)
        self.step, self.sampled, self.proposals = None, {}, {}
        return self.core.end_step(step, self.end_s, None, accepted)

    def _apply_plans_only(self, batch) -> None:
        # a schedule() that runs nothing may still swap (a preemption): the KV must move, untimed, as the
        # simulator charges it nothing
        if batch is not None and (batch.blocks_to_swap_out or batch.blocks_to_swap_in or batch.blocks_to_copy):
            self.engine.runner.execute(batch, self.tokens, self.core.scheduler.block_table)
