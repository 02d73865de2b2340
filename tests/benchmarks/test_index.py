"""benchmarks/README.md indexes every script with its record, and every record is listed and shown in the docs."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
MEASUREMENTS = BENCHMARKS / "measurements"


def links(markdown: Path) -> set[str]:
    """The relative link targets of a markdown file, anchors dropped."""
    return {target.split("#")[0] for target in re.findall(r"\]\(([^)#:]+(?:#[^)]*)?)\)", markdown.read_text())}


def scripts() -> set[str]:
    found = {p.relative_to(BENCHMARKS).as_posix() for p in BENCHMARKS.rglob("*.py") if p.name != "__init__.py"}
    return found | {p.name for p in BENCHMARKS.glob("*.sh")}


def records() -> set[str]:
    return {p.name for p in MEASUREMENTS.glob("*.md") if p.name != "README.md"}


def test_every_script_and_record_is_in_the_index():
    indexed = links(BENCHMARKS / "README.md")
    assert scripts() - indexed == set()
    assert {f"measurements/{name}" for name in records()} - indexed == set()


def test_every_link_of_the_index_leads_to_a_file():
    missing = [target for target in links(BENCHMARKS / "README.md") if not (BENCHMARKS / target).exists()]
    assert missing == []


def test_every_record_is_listed_and_shown_in_the_docs():
    assert records() - links(MEASUREMENTS / "README.md") == set()
    included = set()
    for page in (ROOT / "docs" / "measurements").glob("*.md"):
        included |= set(re.findall(r'--8<-- "benchmarks/measurements/([^"]+)"', page.read_text()))
    assert records() - included == set()
    assert {name for name in included if name != "README.md"} - records() == set()
