"""What the sweep-process tests share: a command's child processes read from /proc (do a command's workers
end with it?). The tiny sweep they run is tests/helpers/configs.TINY."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's reaper is late


def all_exit(pids: list[int], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(alive(p) for p in pids)


def reap(proc: subprocess.Popen, workers: list[int]) -> None:
    """Kill whatever of a command and its workers still runs (a failing test leaves no orphan), then wait
    for the command and close its pipes."""
    for pid in [proc.pid, *workers]:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
