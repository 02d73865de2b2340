"""The progress line's count and time left."""
from sim.experiment.progress import Eta, duration_text


def test_time_left_is_the_pace_so_far_per_unit_of_work(monkeypatch):
    clock = iter([0.0, 10.0, 30.0])
    monkeypatch.setattr("sim.experiment.progress.time.perf_counter", lambda: next(clock))
    eta = Eta()  # starts at 0 s
    eta.expect(3, 3600)  # three hour-long runs
    eta.expect(2, 900)  # and two of 15 minutes
    eta.skip(1, 3600)  # one found already done
    assert eta.finished(3600) == "[1/4, 15s left]"  # 10 s for 3600 of 5400 left
    assert eta.finished(900) == "[2/4, 30s left]"  # 30 s for 4500 done, 4500 left


def test_duration_text():
    assert [duration_text(s) for s in (12.4, 185, 3720)] == ["12s", "3m05s", "1h02m"]
