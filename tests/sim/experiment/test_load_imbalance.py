"""load_imbalance: the busiest replica's routed work (prompt + n x output tokens) over the mean replica's."""
import math

import numpy as np

from sim.experiment.metrics import SUMMARY_METRICS, load_imbalance


def table(replica, prompt, output, n=None):
    return {"replica": np.array(replica), "prompt_len": np.array(prompt), "output_len": np.array(output),
            "n": np.array(n if n is not None else [1] * len(replica))}


def test_the_busiest_replicas_work_over_the_mean_replicas():
    # replica 0: 100 + 50 and 10 + 2 x 20 = 200; replica 1: 40 + 60 = 100; replica 2 nothing: mean 100
    requests = table([0, 1, 0], [100, 40, 10], [50, 60, 20], [1, 1, 2])
    assert load_imbalance(requests, replicas=3) == 2.0
    assert load_imbalance(requests) == 200 / 150  # without the fleet's size: the replicas the requests name


def test_balanced_one_replica_all_on_one_and_no_work():
    assert load_imbalance(table([0, 1], [10, 5], [0, 5]), replicas=2) == 1.0
    assert load_imbalance(table([0, 0], [10, 5], [3, 5]), replicas=1) == 1.0
    assert load_imbalance(table([2, 2], [10, 5], [3, 5]), replicas=4) == 4.0
    assert math.isnan(load_imbalance(table([], [], []), replicas=2))
    unnamed = {k: v for k, v in table([3, 3], [10, 5], [3, 5]).items() if k != "replica"}
    assert load_imbalance(unnamed) == 1.0  # a table naming no replica is one replica's
    assert math.isnan(load_imbalance({k: v for k, v in unnamed.items() if k != "prompt_len"}))


def test_it_is_a_summary_column():
    assert SUMMARY_METRICS[-1] == "load_imbalance"
