"""MkDocs hook: the reference plots (results/reference/*.png) appear in the site as img/<name>, without a
second copy in docs/ to drift from the ones the runs write."""
from pathlib import Path

from mkdocs.structure.files import File

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"


def on_files(files, config):
    for png in sorted(REFERENCE.glob("*.png")):
        files.append(File.generated(config, f"img/{png.name}", abs_src_path=str(png)))
    return files
