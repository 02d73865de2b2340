"""The README's Python example runs as written: the docs stay true to the code."""
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_engine_example_runs(capsys, monkeypatch):
    pytest.importorskip("torch")
    # as a user runs it on a CPU: torch kernels, not the Triton interpreter the kernel tests turn on
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README lost its Python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})
    printed = capsys.readouterr().out
    assert "RequestRecord" in printed and "first_token_s" in printed
