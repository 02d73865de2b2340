"""The running batch kept from step to step: vLLM's running sequences as rows, and when each needs a block.

Every step decodes every running sequence, but few of them change anything else: with blocks of 16 tokens a
sequence takes a new block once in 16 steps, and after its first decode (or a beam's fork) its last block is
its own. So instead of walking every sequence's block table each step, the rows keep

- `seqs`: the running sequences in the order schedule() gives them their slots (the running groups' order,
  each group's sequences in order), and `groups`, each row's request; changed where a group starts or stops
  running or a sequence finishes, not rebuilt;
- a calendar of the step (`tick`: steps every row decoded in) at which each row's last block is full, so
  that reserve() looks only at the rows due, and those whose last block may be shared (`pending`: a group of
  several samples just prefilled, a beam just forked), which copy it on write.

A row's length grows by one a step, so a table of C slots over L tokens, reserved at tick T, needs its next
block at tick T + (C - L) + 1. Steps in which not every row decodes (a prompt-only iteration, a chunk part
way through a prompt, a decode stretch, preemption) leave the calendar `stale`: the next reserve() reads
every row's slack again. The calendar only names candidates: BlockManager.append_slots checks each as it
always did, so a row named early or twice gets nothing it does not need (an entry left from before a
preemption, say: it comes due with the row's own, and the two are one from then on); a row the calendar missed would go
without its block, which the scheduler tests check after every step (every decoding sequence's table holds
its length and its last block is its own). The candidates take their blocks in the rows' order (`rank_of`),
as the walk over every row gave them, so each gets the very block id it did.
"""
from __future__ import annotations

from engine.core.block_manager import BlockManager
from engine.core.sequence import SeqStatus, Sequence, SequenceGroup


class RunningBatch:
    """The running sequences as rows, and the calendar of their appends (module docstring)."""

    __slots__ = ("blocks", "block_size", "seqs", "seq_ids", "groups", "rank_of", "widest", "tick", "reserved_through",
                 "due", "pending", "stale")

    def __init__(self, blocks: BlockManager, block_size: int) -> None:
        self.blocks, self.block_size = blocks, block_size
        self.seqs: list[Sequence] = []
        self.seq_ids: list[int] = []  # theirs, for the batch's list of decodes
        self.groups: list[SequenceGroup] = []
        self.rank_of: dict[int, int] = {}  # seq id -> a number that grows with the row's place
        self.widest = 0  # at least the most running sequences of any one group
        self.tick = 0  # steps in which every row decoded once
        self.reserved_through = 0  # the last tick whose due rows reserve() took
        # the rows due at tick t, at t % (block_size + 1): a row is due within block_size ticks of its reserve
        self.due: list[list[Sequence]] = [[] for _ in range(block_size + 1)]
        self.pending: list[Sequence] = []  # rows whose last block may be shared
        self.stale = False

    # --- who runs -----------------------------------------------------------------------------------
    def insert(self, group: SequenceGroup, before: SequenceGroup | None) -> None:
        """The group's running sequences join, ahead of the rows of `before` (None: after every row)."""
        seqs = group.running_seqs()
        self.widest = max(self.widest, len(seqs))
        if before is None:  # after every row: numbered on from the last
            rank = self.rank_of[self.seqs[-1].seq_id] + 1 if self.seqs else 0
            self.seqs.extend(seqs)
            self.seq_ids.extend([seq.seq_id for seq in seqs])
            self.groups.extend([group] * len(seqs))
            for i, seq in enumerate(seqs):
                self.rank_of[seq.seq_id] = rank + i
        else:
            at = self.seqs.index(before.running_seqs()[0])
            self.seqs[at:at] = seqs
            self.seq_ids[at:at] = [seq.seq_id for seq in seqs]
            self.groups[at:at] = [group] * len(seqs)
            self._number()
        for seq in seqs:
            self._schedule(seq)
            if self._shares_last_block(seq):
                self.pending.append(seq)

    def remove(self, group: SequenceGroup) -> None:
        """The group's running sequences leave (preempted, swapped out, aborted)."""
        seqs = group.running_seqs()
        if not seqs:
            return
        at = self.seqs.index(seqs[0])
        del self.seqs[at:at + len(seqs)]
        del self.seq_ids[at:at + len(seqs)]
        del self.groups[at:at + len(seqs)]
        for seq in seqs:
            self.rank_of.pop(seq.seq_id, None)

    def rebuild(self, running: list[SequenceGroup]) -> None:
        """The rows again from the running groups, after a step in which not every row decoded."""
        self.seqs, self.groups, self.widest = [], [], 0
        for group in running:
            seqs = group.running_seqs()
            self.widest = max(self.widest, len(seqs))
            self.seqs.extend(seqs)
            self.groups.extend([group] * len(seqs))
        self.seq_ids = [seq.seq_id for seq in self.seqs]
        self._number()
        self.stale = True

    def _number(self) -> None:
        self.rank_of = {seq.seq_id: i for i, seq in enumerate(self.seqs)}

    def forked(self, parent: Sequence, child: Sequence) -> None:
        """A beam's child took its parent's table: both share its last block, and the child's slack is the
        parent's."""
        self._schedule(child)
        self.pending.extend((parent, child))

    # --- one step -----------------------------------------------------------------------------------
    def due_now(self) -> list[Sequence]:
        """The rows that may need a block or a copy on write for their next token, once each, in row order:
        from the calendar (stale: from every row's table). Each takes at most one free block. Taken from the
        calendar: reserve() or walked() puts them back."""
        if self.stale or self.tick - self.reserved_through > self.block_size:
            candidates = self._every_row_due()
        else:
            candidates = self._rows_due()
        if len(candidates) > 1 and not self._in_row_order(candidates):
            rank_of = self.rank_of
            by_rank = {rank_of[seq.seq_id]: seq for seq in candidates}  # once each, in row order
            candidates = [by_rank[rank] for rank in sorted(by_rank)]
        self.pending = []
        self.reserved_through = self.tick
        return candidates

    def _in_row_order(self, seqs: list[Sequence]) -> bool:
        """Each after the one before it (so none twice): the calendar's usual order, as rows are scheduled in it."""
        rank_of = self.rank_of
        last = -1
        for seq in seqs:
            rank = rank_of[seq.seq_id]
            if rank <= last:
                return False
            last = rank
        return True

    def reserve(self, due: list[Sequence], copies: list[tuple[int, int]]) -> list[Sequence]:
        """A slot for every row's next token (BlockManager.append_slots for the rows due_now() named), the
        copies on write added to `copies`; returns the rows, the step's decodes in order."""
        if due:
            self.blocks.append_slots(due, copies)
            for seq in due:
                self._schedule(seq)
        return list(self.seqs)

    def walked(self, due: list[Sequence]) -> None:
        """schedule() gave the rows their slots group by group instead, preempting as it went: those of `due`
        that still run have theirs, and their next turns go in the calendar."""
        running = SeqStatus.RUNNING
        for seq in due:
            if seq.status is running:
                self._schedule(seq)

    def _rows_due(self) -> list[Sequence]:
        due, size = self.due, self.block_size + 1
        running = SeqStatus.RUNNING
        candidates = [seq for seq in self.pending if seq.status is running]
        for tick in range(self.reserved_through + 1, self.tick + 1):
            slot = tick % size
            for seq in due[slot]:
                if seq.status is running:  # else finished or preempted since
                    candidates.append(seq)
            due[slot] = []
        return candidates

    def _every_row_due(self) -> list[Sequence]:
        """Stale: the rows short of a slot or sharing their last block, read from their tables; the calendar
        starts again from them."""
        self.due, self.stale = [[] for _ in range(self.block_size + 1)], False
        candidates = []
        for seq in self.seqs:
            if self._slack(seq) < 0 or self._shares_last_block(seq):
                candidates.append(seq)
            else:
                self._schedule(seq)
        return candidates

    def advance(self, num_steps: int) -> list[int]:
        """Every row decoded num_steps times: their lengths grow, the calendar's clock moves on; returns the
        rows that reached their final length, in order."""
        self.tick += num_steps
        finished = []
        seqs = self.seqs
        for i in range(len(seqs)):
            seq = seqs[i]
            seq.length += num_steps
            if seq.length >= seq.prompt_len + seq.output_len:
                finished.append(i)
        return finished

    def drop_rows(self, rows: list[int]) -> list[SequenceGroup]:
        """The finished rows leave; returns their groups, each once, in row order."""
        touched: list[SequenceGroup] = []
        for i in rows:
            group = self.groups[i]
            if not touched or touched[-1] is not group:
                touched.append(group)
            self.rank_of.pop(self.seqs[i].seq_id, None)
        for i in reversed(rows):
            del self.seqs[i]
            del self.seq_ids[i]
            del self.groups[i]
        return touched

    # --- the calendar ---------------------------------------------------------------------------------
    def _slack(self, seq: Sequence) -> int:
        """Free slots in the row's table past its length (negative: short of its next token's)."""
        return len(self.blocks.block_tables[seq.seq_id]) * self.block_size - seq.length

    def _shares_last_block(self, seq: Sequence) -> bool:
        table = self.blocks.block_tables[seq.seq_id]
        return bool(table) and self.blocks.gpu.ref_counts[table[-1]] != 1

    def _schedule(self, seq: Sequence) -> None:
        self.due[(self.tick + max(self._slack(seq), 0) + 1) % (self.block_size + 1)].append(seq)


def in_batch_order(touched: list[SequenceGroup], prefilled: list[SequenceGroup],
                   joined: list[SequenceGroup]) -> list[SequenceGroup]:
    """Groups in the order the group-by-group pass would meet them: the prompts just computed (prefilled),
    then the decodes, those that joined this step (swapped in, arrived) last; the rest keep the rows' order."""
    first = [g for g in prefilled if any(g is t for t in touched)]
    last = [g for g in joined if any(g is t for t in touched)]
    middle = [g for g in touched if not any(g is f for f in first) and not any(g is j for j in last)]
    return first + middle + last
