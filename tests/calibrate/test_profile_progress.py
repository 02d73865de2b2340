"""The profiler's progress line goes to the stderr of the moment it is written, not to the one there was when
calibrate.profiling.profile was first imported (under pytest, a capture that an earlier test has closed since)."""
import io
import sys

from calibrate.profiling.profile import Progress


def test_progress_writes_to_the_current_stderr(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    progress = Progress(2)
    progress.update(1)
    progress.update(2)
    assert "profiling: 1/2 timed runs" in stream.getvalue() and stream.getvalue().endswith("\n")
