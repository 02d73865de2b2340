"""The kernel benchmarks run and check what they time: varlen prefill and paged decode against
dense SDPA over the same tokens, on tiny shapes (under the interpreter, the Triton kernels)."""
import pytest

torch = pytest.importorskip("torch")

from benchmarks.gpu import gpu_check, prefill_kernel  # noqa: E402


@pytest.fixture(autouse=True)
def _single_thread(one_cpu_thread):
    yield


@pytest.mark.parametrize("prompts", [1, 3])
def test_prefill_benchmark_matches_sdpa(prompts):
    row = prefill_kernel.measure(48, prompts, False, heads=2, head_dim=16, dtype=torch.float32, repeats=1)
    assert row["match"], row
    assert row["tokens"] == 48 and row["prompts"] == prompts and row["varlen_us"] > 0 and row["sdpa_us"] > 0


def test_prefill_rows_compare_each_split_to_one_prompt(monkeypatch):
    monkeypatch.setattr(prefill_kernel, "CPU_TOTALS", (32,))
    monkeypatch.setattr(prefill_kernel, "measure", lambda total, k, *args, **kwargs: dict(
        tokens=total, prompts=k, varlen_us=10.0 * (1 + k), sdpa_us=5.0, per_prompt_us=1.0, match=True))
    rows, title = prefill_kernel.prefill_rows(False, quick=True, repeats=1)
    assert [(r["prompts"], r["vs_one"]) for r in rows] == [(1, 1.0), (4, 2.5)]
    assert "CPU path" in title


def test_decode_check_matches_dense():
    row = gpu_check.measure(2, 40, False, heads=2, head_dim=16, dtype=torch.float32)
    assert row["match"], row


@pytest.mark.slow
def test_prefill_benchmark_stands_below_the_gpu_check():
    """gpu_check runs the prefill timings; the prefill benchmark takes its inputs and clock from the modules below
    both, so importing it alone loads no gpu_check (the two once imported each other)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; import benchmarks.gpu.prefill_kernel; "
            "sys.exit('benchmarks.gpu.gpu_check' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
def test_kernel_registers_builds_for_sm90_without_a_gpu():
    import subprocess
    import sys
    from pathlib import Path

    triton = pytest.importorskip("triton")
    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    if not any((bin_dir / name).exists() for name in ("ptxas-blackwell", "ptxas")):
        pytest.skip("triton ships no ptxas here")
    root = Path(__file__).resolve().parents[2]
    # Every variant: building for a GPU catches what the interpreter lets through (types that
    # differ between branches, tiles that cannot fit).
    done = subprocess.run([sys.executable, "benchmarks/gpu/kernel_registers.py"], cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if " registers " in line and "bytes spill" in line]
    assert len(rows) == 12, done.stdout
    default_builds = ("prefill fp16 d128 64x64", "prefill fp32", "decode one pass fp16 d128",
                      "decode partition fp16 d128", "decode reduce")
    defaults = [row for row in rows if row.startswith(default_builds)]
    assert len(defaults) == 5 and all(" 0 bytes spill stores" in row for row in defaults), done.stdout
