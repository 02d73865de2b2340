"""Where a path written in a config is looked for: one rule for every path-valued key.

An absolute path is taken as written. A relative one is looked for beside the config file (where its author put
it), then in the current folder (where a path typed on the command line, `--set workload.trace=mine.csv`, was
written from). A key whose files servesim ships (profiles, host models, send/recv tables, hardware sheets, models)
then finds the shipped file by its name, so that a config copied out of the repository, or read by an installed
wheel, names what it named in the source tree.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from engine.errors import SpecError


@dataclass(frozen=True)
class Shipped:
    """One kind of package data: FOLDER/NAME+SUFFIX, found by any install from any folder."""

    folder: Path
    suffix: str  # ".yaml", ".send_recv.csv"
    tree: str  # the folder as the source tree names it: "calibrate/profiles"
    what: str  # "profile", "send/recv table": what the error calls one

    def names(self) -> list[str]:
        return sorted(p.name.removesuffix(self.suffix) for p in self.folder.glob(f"*{self.suffix}"))

    def named(self, value: str) -> Path | None:
        """The shipped file `value` names by its name (`a100-80gb`), its file's name (`a100-80gb.yaml`) or its
        place in the source tree, from wherever (`../../calibrate/profiles/a100-80gb.yaml`); None for a path into
        any other folder (a user's own folder is not second-guessed)."""
        path = Path(value)
        folder = path.parent.parts
        tree = Path(self.tree).parts
        if folder and folder[-len(tree):] != tree:
            return None
        name = path.name if path.name.endswith(self.suffix) else path.name + self.suffix
        candidate = self.folder / name
        return candidate if candidate.is_file() else None


def resolve_path(value: str | Path, base_dir: str | Path | None, source: str, key: str,
                 shipped: Shipped | None = None, what: str = "a file") -> Path:
    """The existing file `value` names (module docstring); a folder, or nothing, is a SpecError naming where it
    looked. `what` says what the key wants, for a folder given in its place."""
    path = Path(value).expanduser()
    places = [path] if path.is_absolute() else _relative_places(path, base_dir)
    named = shipped.named(str(value)) if shipped is not None and not path.is_absolute() else None
    for place in places + ([named] if named is not None else []):
        if place.is_file():
            return place.resolve()
    folder = next((place for place in places if place.is_dir()), None)
    if folder is not None:  # "not found" would send the user looking for a file that is there
        raise SpecError(source, key, f"{str(value)!r} is a folder ({folder.resolve()}); give the path of {what}")
    tried = ", ".join(str(place.resolve()) for place in places)
    if shipped is None:
        raise SpecError(source, key, f"file {str(value)!r} not found (tried {tried})")
    stem = Path(value).name.removesuffix(shipped.suffix)
    raise SpecError(source, key, f"file {str(value)!r} not found (tried {tried} and servesim's shipped "
                                 f"{shipped.what}s, {shipped.tree}/){names_hint(stem, shipped.names(), 'shipped')}")


def names_hint(value: str, names: list[str], label: str = "available") -> str:
    """`; available: [...]` after an unknown name, led by `did you mean 'NAME'?` where one is close to it."""
    close = difflib.get_close_matches(value, names, n=1)
    guess = f" did you mean {close[0]!r}?" if close else ""
    return f";{guess} {label}: {names}"


def _relative_places(path: Path, base_dir: str | Path | None) -> list[Path]:
    places = [Path(base_dir) / path] if base_dir is not None else []
    if not places or places[0].resolve() != path.resolve():
        places.append(path)
    return places
