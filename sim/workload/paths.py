"""Where workload data lives, and how a relative path in a config is resolved."""
from __future__ import annotations

from pathlib import Path

from engine.core.errors import SpecError

# sim/workload/paths.py -> repo root; data paths must not depend on the caller's cwd.
REPO_ROOT = Path(__file__).resolve().parents[2]
TRACES_DIR = REPO_ROOT / "traces"
SHAREGPT_CSV = TRACES_DIR / "sharegpt_opt.csv"


def resolve_data_path(value: str | Path, base_dir: str | Path | None, source: str, key: str) -> Path:
    """An existing file: absolute, or relative to the config's folder, then to the repo root."""
    path = Path(value).expanduser()
    if path.is_absolute():
        candidates = [path]
    else:
        candidates = [Path(base_dir) / path] if base_dir is not None else []
        if not candidates or candidates[0].resolve() != (REPO_ROOT / path).resolve():
            candidates.append(REPO_ROOT / path)
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    tried = ", ".join(str(c) for c in candidates)
    raise SpecError(source, key, f"file {str(value)!r} not found (tried {tried})")
