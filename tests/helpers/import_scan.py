"""Reading a module's imports from its source, as the import rules and the import graph read them
(tests/test_import_rules.py, tests/test_import_graph.py): every import statement anywhere in a file (top level,
inside functions, under `if TYPE_CHECKING:`), but a top-level `if __name__ == "__main__":` block, which is the
program and never runs on an import."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module an import statement in `source` names, relative imports made absolute."""
    found = set()
    for node in ast.walk(without_main_blocks(ast.parse(source))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".")
                package = package[:len(package) - node.level + (1 if is_package else 0)]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return found


def is_main_guard(node: ast.stmt) -> bool:
    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__" and len(test.comparators) == 1 and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "__main__")


def without_main_blocks(tree: ast.Module) -> ast.Module:
    """The module as an import runs it: a top-level `if __name__ == "__main__":` block never does."""
    tree.body = [node for node in tree.body if not is_main_guard(node)]
    return tree
