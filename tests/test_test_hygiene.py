"""Test code is shared one way: from helper modules (tests/helpers/, or a helper beside its tests), each under
one module name, never from another test file. A module imported under two names, or a test file imported by
another, is loaded twice: its module-level state (a cache, a counter, a class) exists twice."""
import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_no_test_file_imports_another():
    bad = [f"{path.relative_to(TESTS)} imports {name}" for path in TESTS.rglob("*.py") for name in imports(path)
           if name.rsplit(".", 1)[-1].startswith("test_") or name.rsplit(".", 1)[-1] == "conftest"]
    assert bad == []


def test_each_helper_is_imported_under_one_name():
    helpers = {p.stem for p in TESTS.rglob("*.py") if not p.name.startswith(("test_", "conftest", "__init__"))}
    assert {"core_harness", "configs", "processes", "simulation", "vllm_policy"} <= helpers
    spellings = defaultdict(set)
    for path in TESTS.rglob("*.py"):
        for name in imports(path):
            if name.rsplit(".", 1)[-1] in helpers:
                spellings[name.rsplit(".", 1)[-1]].add(name)
    assert {stem: names for stem, names in spellings.items() if len(names) > 1} == {}
    assert spellings["core_harness"] == {"tests.helpers.core_harness"}
