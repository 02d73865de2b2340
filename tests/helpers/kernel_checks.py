"""What the kernel tests share: where they run, whether Triton can, and how close a kernel must land.

Import after `pytest.importorskip("torch")`: a machine without torch skips those tests cleanly."""
import os

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TRITON_RUNNABLE = DEVICE == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"
needs_triton = pytest.mark.skipif(not TRITON_RUNNABLE, reason="needs CUDA or TRITON_INTERPRET=1")

# fp16/bf16 outputs are rounded from fp32 accumulators: a unit or so in the last place apart.
TOLERANCE = {
    torch.float32: dict(atol=2e-5, rtol=1e-4),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=2e-2, rtol=2e-2),
}
