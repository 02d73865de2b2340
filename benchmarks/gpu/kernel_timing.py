"""How the kernel benchmarks time a call and print their rows: do_bench on a GPU, a median on a CPU."""
from __future__ import annotations

import statistics
import time


def time_gpu(fn) -> float:
    import triton.testing  # imported where a GPU is timed: a CPU run needs no triton

    return triton.testing.do_bench(fn, warmup=10, rep=50) * 1e3  # ms -> us


def time_cpu(fn, repeats=5) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6


def format_cell(column: str, value) -> str:
    if column == "max_abs_diff":
        return f"{value:>12.2e}"
    if isinstance(value, float):
        return f"{value:>12.2f}"
    return f"{value!s:>12}"


def format_table(rows: list[dict], title: str) -> str:
    columns = list(rows[0])
    lines = [title, "  ".join(f"{c:>12}" for c in columns)]
    lines += ["  ".join(format_cell(c, row[c]) for c in columns) for row in rows]
    return "\n".join(lines)
