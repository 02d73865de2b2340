"""Bad inputs stop with a ValueError before anything launches; backend choice; optional triton."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from engine.kernels import (  # noqa: E402
    copy_blocks,
    paged_attention_decode,
    resolve_backend,
    swap_blocks,
    write_kv_cache,
)

REPO_ROOT = Path(__file__).resolve().parents[3]


def decode_args(**overrides):
    """A valid decode call (2 sequences, 4 heads over 2 kv heads), with fields replaced."""
    args = dict(
        query=torch.randn(2, 4, 64),
        key_cache=torch.randn(6, 8, 2, 64),
        value_cache=torch.randn(6, 8, 2, 64),
        block_tables=torch.tensor([[0, 3], [5, 1]], dtype=torch.int32),
        context_lens=torch.tensor([9, 16], dtype=torch.int32),
        scale=0.125,
    )
    args.update(overrides)
    return args


DECODE_ERRORS = {
    "query_dtype": (dict(query=torch.randn(2, 4, 64, dtype=torch.float16)), "mismatched dtypes"),
    "query_rank": (dict(query=torch.randn(2, 256)), "query must have shape"),
    "cache_rank": (dict(key_cache=torch.randn(6, 8, 128)), "key_cache must have shape"),
    "cache_pair": (dict(value_cache=torch.randn(6, 8, 2, 32)), "mismatched shapes"),
    "cache_dtype": (dict(key_cache=torch.randn(6, 8, 2, 64).double(),
                         value_cache=torch.randn(6, 8, 2, 64).double()), "key_cache must have dtype"),
    "device": (dict(block_tables=torch.zeros(2, 2, dtype=torch.int32, device="meta")),
               "mismatched devices"),
    "tables_int64": (dict(block_tables=torch.tensor([[0, 3], [5, 1]])), "block_tables must have dtype"),
    "lens_int64": (dict(context_lens=torch.tensor([9, 16])), "context_lens must have dtype"),
    "lens_rows": (dict(context_lens=torch.tensor([9], dtype=torch.int32)), "context_lens has 1 rows"),
    "too_long": (dict(context_lens=torch.tensor([9, 17], dtype=torch.int32)), "exceeds block_tables"),
    "negative": (dict(context_lens=torch.tensor([-1, 4], dtype=torch.int32)), ">= 0"),
    "heads": (dict(query=torch.randn(2, 3, 64)), "multiple of num_kv_heads"),
    "head_dim": (dict(query=torch.randn(2, 4, 32)), "head_dim"),
    "block_id": (dict(block_tables=torch.tensor([[0, 6], [5, 1]], dtype=torch.int32)), "block id 6"),
    "scale": (dict(scale=torch.tensor(0.125)), "scale must be"),
}


@pytest.mark.parametrize("overrides,message", DECODE_ERRORS.values(), ids=list(DECODE_ERRORS))
@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_decode_rejects(overrides, message, backend):
    with pytest.raises(ValueError, match=message):
        paged_attention_decode(**decode_args(**overrides), backend=backend)


def test_decode_ignores_padding_past_the_context():
    # 8 tokens fill one block of 8: row 1's second column is padding, whatever id it holds.
    args = decode_args(block_tables=torch.tensor([[0, 3], [5, -7]], dtype=torch.int32),
                       context_lens=torch.tensor([9, 8], dtype=torch.int32))
    assert paged_attention_decode(**args, backend="torch").isfinite().all()


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend must be one of"):
        paged_attention_decode(**decode_args(), backend="cuda")


def write_args(**overrides):
    args = dict(
        key=torch.randn(3, 2, 64), value=torch.randn(3, 2, 64),
        key_cache=torch.zeros(4, 8, 2, 64), value_cache=torch.zeros(4, 8, 2, 64),
        slot_mapping=torch.tensor([0, -1, 31]),
    )
    args.update(overrides)
    return args


WRITE_ERRORS = {
    "slots_int32": (dict(slot_mapping=torch.tensor([0, -1, 31], dtype=torch.int32)),
                    "slot_mapping must have dtype"),
    "slot_range": (dict(slot_mapping=torch.tensor([0, -1, 32])), "slot 32"),
    "slot_count": (dict(slot_mapping=torch.tensor([0, 1])), "2 slots for 3 tokens"),
    "key_dtype": (dict(key=torch.randn(3, 2, 64).half(), value=torch.randn(3, 2, 64).half()),
                  "mismatched dtypes"),
    "key_value": (dict(value=torch.randn(3, 2, 32)), "mismatched shapes"),
    "heads": (dict(key=torch.randn(3, 1, 64), value=torch.randn(3, 1, 64)), "key_cache holds"),
    "device": (dict(slot_mapping=torch.zeros(3, dtype=torch.int64, device="meta")),
               "mismatched devices"),
}


@pytest.mark.parametrize("overrides,message", WRITE_ERRORS.values(), ids=list(WRITE_ERRORS))
def test_write_rejects(overrides, message):
    with pytest.raises(ValueError, match=message):
        write_kv_cache(**write_args(**overrides))


COPY_ERRORS = {
    "range": (torch.tensor([[0, 4]]), "block id 4"),
    "negative": (torch.tensor([[-1, 2]]), "block id -1"),
    "dst_twice": (torch.tensor([[0, 2], [1, 2]]), "destination block more than once"),
    "chained": (torch.tensor([[0, 1], [1, 2]]), "both source and destination"),
    "shape": (torch.tensor([0, 1]), r"\[n, 2\]"),
    "float": (torch.tensor([[0.0, 1.0]]), "block_mapping must have dtype"),
}


@pytest.mark.parametrize("mapping,message", COPY_ERRORS.values(), ids=list(COPY_ERRORS))
def test_copy_rejects(mapping, message):
    caches = [torch.zeros(4, 8, 2, 64) for _ in range(2)]
    with pytest.raises(ValueError, match=message):
        copy_blocks(caches[:1], caches[1:], mapping)


def test_copy_rejects_unpaired_layers():
    with pytest.raises(ValueError, match="2 key caches but 1 value caches"):
        copy_blocks([torch.zeros(4, 8, 2, 64)] * 2, [torch.zeros(4, 8, 2, 64)],
                    torch.tensor([[0, 1]]))


def test_swap_rejects():
    pool, host = torch.zeros(4, 8, 2, 64), torch.zeros(2, 8, 2, 64)
    with pytest.raises(ValueError, match="destination block 2"):
        swap_blocks(pool, host, torch.tensor([[0, 2]]))
    with pytest.raises(ValueError, match="src_cache blocks"):
        swap_blocks(pool, torch.zeros(2, 16, 2, 64), torch.tensor([[0, 1]]))
    with pytest.raises(ValueError, match="mismatched dtypes"):
        swap_blocks(pool, host.half(), torch.tensor([[0, 1]]))


def test_resolve_backend(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert resolve_backend("auto", cpu) == "torch"
    assert resolve_backend("auto", cuda) == "triton"
    assert resolve_backend("torch", cuda) == "torch"
    with pytest.raises(ValueError, match="needs CUDA tensors or TRITON_INTERPRET=1"):
        resolve_backend("triton", cpu)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert resolve_backend("auto", cpu) == "triton"


def test_imports_without_triton():
    # Importing the package must not import triton, and without triton "auto" runs torch.
    script = """
import sys
import engine.kernels as kernels
assert "triton" not in sys.modules, "engine.kernels imported triton eagerly"
sys.modules["triton"] = None
kernels.triton_available.cache_clear()
import torch
out = kernels.paged_attention_decode(
    torch.randn(1, 2, 8), torch.randn(2, 4, 2, 8), torch.randn(2, 4, 2, 8),
    torch.tensor([[1]], dtype=torch.int32), torch.tensor([3], dtype=torch.int32), 0.3)
assert out.shape == (1, 2, 8)
try:
    kernels.paged_attention_decode(
        torch.randn(1, 2, 8), torch.randn(2, 4, 2, 8), torch.randn(2, 4, 2, 8),
        torch.tensor([[1]], dtype=torch.int32), torch.tensor([3], dtype=torch.int32), 0.3,
        backend="triton")
except ValueError as error:
    assert "not installed" in str(error)
else:
    raise AssertionError("backend='triton' without triton should fail")
"""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO_ROOT))
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
