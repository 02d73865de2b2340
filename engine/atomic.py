"""Write a file whole or not at all, for every room: a reader never sees half a file."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def replace_atomic(path: str | Path, write: Callable[[str], object]) -> Path:
    """Let `write` fill a temporary file beside `path`, then rename it over `path`.

    The rename is atomic on one filesystem, which is why the temporary file lives in the same folder.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are for sharing
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_atomic(path: str | Path, write: Callable[[IO[bytes]], object]) -> Path:
    """The same, for writers that take an open binary file."""
    def fill(tmp: str) -> None:
        with open(tmp, "wb") as f:
            write(f)
    return replace_atomic(path, fill)


def write_text_atomic(path: str | Path, text: str) -> Path:
    def fill(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    return replace_atomic(path, fill)


def remove_stale_temporaries(folder: str | Path) -> list[Path]:
    """Delete the temporary files replace_atomic left in `folder` when its process was killed.

    SIGKILL (or a power cut) skips the cleanup above, and nothing else would ever remove them.
    Call it only where no other process is writing into `folder` at the same time.
    """
    stale = sorted(Path(folder).glob(".*.tmp")) if Path(folder).is_dir() else []
    for path in stale:
        path.unlink(missing_ok=True)
    return stale
