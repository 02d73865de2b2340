"""The README's and the docs' Python examples stay true to the code."""
import ast
import re
from pathlib import Path

import pytest

import servesim

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.slow
def test_readme_engine_example_runs(capsys, monkeypatch):
    pytest.importorskip("torch")
    # as a user runs it on a CPU: torch kernels, not the Triton interpreter the kernel tests turn on
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    blocks = [block for block in python_blocks(README) if "engine.runtime" in block]
    assert blocks, "the README lost its engine example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})
    printed = capsys.readouterr().out
    assert "RequestRecord" in printed and "first_token_s" in printed


@pytest.mark.parametrize("path", [README, REPO / "docs" / "api.md"], ids=["README", "docs-api"])
def test_api_examples_call_only_what_servesim_has(path):
    """The examples of `import servesim` (run for real, on a tiny config, in tests/test_api.py) parse, and
    call only the package's functions with keywords those functions take."""
    blocks = [block for block in python_blocks(path) if "import servesim" in block]
    assert blocks, f"{path.name} lost its servesim example"
    import inspect

    for block in blocks:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and getattr(node.func.value, "id", None) == "servesim":
                assert node.func.attr in servesim.__all__, node.func.attr
                params = inspect.signature(getattr(servesim, node.func.attr)).parameters
                assert all(k.arg in params for k in node.keywords), (node.func.attr, [k.arg for k in node.keywords])
