"""Each request's chunk times come from its replica's iteration ends: exactly for a request never preempted (every
iteration from its first token to its finish is its own, prompt-only ones aside under vLLM's separate policy, a
speculating step one chunk, n sequences n chunks a step, a split fleet's decode replica joined late), placed with
its sum kept for a preempted one, and flagged so."""
from __future__ import annotations

import numpy as np
import pytest

from sim.experiment.token_stream import Schedule, chunk_times

NAN = float("nan")


def table(**columns) -> dict[str, np.ndarray]:
    return {name: np.asarray(values) for name, values in columns.items()}


def iterations(*rows: tuple[int, float, float, int]) -> dict[str, np.ndarray]:
    """(replica, start_s, duration_s, num_decodes) a row."""
    replica, start, duration, decodes = zip(*rows)
    return table(replica=replica, start_s=start, duration_s=duration, num_decodes=decodes)


def requests(*rows: tuple, **extra) -> dict[str, np.ndarray]:
    """(replica, first_token_s, finish_s, output_len, n, num_preemptions) a row."""
    replica, first, finish, output, n, preempted = zip(*rows)
    return table(request_id=range(len(rows)), replica=replica, first_token_s=first, finish_s=finish,
                 output_len=output, n=n, num_preemptions=preempted, **extra)


# replica 0 ends its iterations at 1, 2, 3.5, 4 and 6; replica 1 at 1.5 and 2.5, between them
FLEET = iterations((0, 0.0, 1.0, 0), (1, 0.5, 1.0, 1), (0, 1.0, 1.0, 1), (1, 1.5, 1.0, 1), (0, 2.0, 1.5, 2),
                   (0, 3.5, 0.5, 2), (0, 4.0, 2.0, 1))


def test_a_request_never_preempted_has_a_chunk_at_each_iteration_end_of_its_replica_after_its_first():
    chunks = chunk_times(requests((0, 1.0, 4.0, 4, 1, 0), (1, 1.5, 2.5, 2, 1, 0), (0, 4.0, 4.0, 1, 1, 0)), FLEET)
    assert [t.tolist() for t in chunks.times] == [[1.0, 2.0, 3.5, 4.0], [1.5, 2.5], [4.0]]
    assert chunks.exact.tolist() == [True, True, True]


def test_the_last_chunk_is_the_finish_itself():
    ends = iterations((0, 0.0, 0.1, 1), (0, 0.1, 0.2, 1))  # 0.1 + 0.2 is 0.30000000000000004
    chunks = chunk_times(requests((0, 0.1, 0.3, 2, 1, 0)), ends)
    assert chunks.times[0].tolist() == [0.1, 0.3] and chunks.exact[0]


def test_prompt_only_iterations_are_skipped_where_the_policy_runs_them():
    # replica 0's iteration ending at 2 runs prompts alone (num_decodes 0) under the separate policy
    ends = iterations((0, 0.0, 1.0, 0), (0, 1.0, 1.0, 0), (0, 2.0, 1.0, 1), (0, 3.0, 1.0, 1))
    request = requests((0, 1.0, 4.0, 3, 1, 0))
    separate = chunk_times(request, ends, Schedule(prompt_only=True))
    assert separate.times[0].tolist() == [1.0, 3.0, 4.0] and separate.exact[0]
    # counted as a mixed policy counts them, three iterations for two tokens do not fit: placed, not exact
    assert not chunk_times(request, ends).exact[0]


def test_a_speculating_step_is_one_chunk():
    # 5 output tokens: the first, then 4 over three steps (one accepted proposal)
    chunks = chunk_times(requests((0, 2.0, 6.0, 5, 1, 0), accepted_tokens=[1]), FLEET)
    assert chunks.times[0].tolist() == [2.0, 3.5, 4.0, 6.0] and chunks.exact[0]


def test_n_sequences_stream_n_chunks_a_step_gaps_of_0_within_it():
    chunks = chunk_times(requests((0, 2.0, 4.0, 3, 2, 0)), FLEET)
    assert chunks.times[0].tolist() == [2.0, 2.0, 3.5, 3.5, 4.0, 4.0]
    assert np.diff(chunks.times[0]).tolist() == [0.0, 1.5, 0.0, 0.5, 0.0]


def test_a_decode_replica_joined_late_takes_the_last_iterations():
    # first token at 1 (a prefill replica's); on decode replica 0 it decoded the last two before its finish at 4
    request = requests((0, 1.0, 4.0, 3, 1, 0))
    late = chunk_times(request, FLEET, Schedule(join_late=True))
    assert late.times[0].tolist() == [1.0, 3.5, 4.0] and late.exact[0]
    assert not chunk_times(request, FLEET).exact[0]  # on one pool three iterations are not two tokens
    # a prompt computed again on the decode replica may be in a prompt-only iteration, which that policy leaves out
    assert not chunk_times(request, FLEET, Schedule(prompt_only=True, join_late=True)).exact[0]


def test_a_preempted_request_is_placed_keeping_its_first_token_finish_and_count():
    chunks = chunk_times(requests((0, 1.0, 6.0, 4, 1, 1)), FLEET)
    times = chunks.times[0]
    # its last two chunks one iteration each, and its preemption's wait in the gap before them
    assert times.tolist() == [1.0, 3.5, 4.0, 6.0] and not chunks.exact[0]
    # answered after its tokens (FasterTransformer's batch): 4 iterations for 2 tokens, even gaps
    answered_late = chunk_times(requests((0, 1.0, 6.0, 3, 1, 0)), FLEET)
    assert answered_late.times[0].tolist() == [1.0, 3.5, 6.0] and not answered_late.exact[0]


@pytest.mark.parametrize("first, finish", [(NAN, NAN), (1.0, NAN)])
def test_a_request_not_finished_has_no_chunks(first, finish):
    chunks = chunk_times(requests((0, first, finish, 3, 1, 0)), FLEET)
    assert len(chunks.times[0]) == 0 and not chunks.exact[0]
