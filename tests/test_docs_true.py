"""The reference pages say what the code accepts, no more and no less.

Both ways: every key a config parser accepts, every shipped GPU, model and host model, every `servesim`
command, subcommand and option is in the docs (docs/config.md, docs/models.md, docs/commands.md); and every key,
GPU, model, command and option those pages list exists. The accepted keys are asked of the parsers themselves:
each refuses an unknown key naming the valid ones, and that list is the one compared, so a key added to a parser
and not to the docs (or dropped from it and left in the docs) fails here. Only the repository is read.
"""
from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from calibrate.hardware.hardware import HARDWARE_DIR, hardware_from_dict
from calibrate.parts.host_model import available_host_models
from engine.errors import SpecError
from engine.runtime.options import engine_options_from_dict
from engine.specs.loader import MODELS_DIR, model_spec_from_dict
from fidelity.config import options_from_dict, validation_from_dict
from servesim.cli import build_parser
from sim.capacity.targets import TARGET_METRICS
from sim.experiment.config import experiment_from_dict

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
SHIPPED_PROFILE = REPO / "calibrate" / "profiles" / "cpu-opt-125m.yaml"
MINIMAL = {"model": "opt-125m", "hardware": "a100-40gb", "workload": {}, "rates": [1]}
CODE_SPAN = re.compile(r"`([^`\n]+)`")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
GLOBAL_OPTIONS = {"--help", "--debug", "--version"}


# --- what the code accepts ----------------------------------------------------------------------------------------
def accepted(parse: Callable[[], object]) -> set[str]:
    """The keys a parser accepts: its own error for an unknown key lists them."""
    with pytest.raises(SpecError) as refused:
        parse()
    found = re.search(r"valid keys are (\[[^\]]*\])", refused.value.message)
    assert found, f"the parser's error for an unknown key lists no valid keys: {refused.value}"
    return set(ast.literal_eval(found.group(1)))


def experiment_keys(**section) -> set[str]:
    """What a minimal experiment accepts where `section` puts an unknown key."""
    return accepted(lambda: experiment_from_dict({**MINIMAL, **section}, "exp.yaml", REPO))


def cost_model_keys(kind: str) -> set[str]:
    path = {} if kind == "roofline" else {"path": str(SHIPPED_PROFILE)}
    return experiment_keys(cost_model={"kind": kind, **path, "no_such_key": 1})


def shipped(directory: Path) -> set[str]:
    return {p.stem for p in directory.glob("*.yaml")}


def commands() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command and subcommand of `servesim`, by its words, with its parser."""
    found = {}

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found[(*words, name)] = sub
                    walk(sub, (*words, name))

    walk(build_parser(), ())
    return found


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings if o.startswith("--")} - GLOBAL_OPTIONS


# --- what the docs list -------------------------------------------------------------------------------------------
def read(page: str) -> str:
    return (DOCS / page).read_text(encoding="utf-8")


def tables(page: str) -> dict[str, dict[str, str]]:
    """Each `## ` section's table rows whose first cell is one `key`: heading -> {key: the row's text}."""
    rows: dict[str, dict[str, str]] = {}
    heading = ""
    for line in read(page).splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
        elif (row := re.match(r"\| `([^`]+)` \|(.*)", line)) is not None:
            rows.setdefault(heading, {})[row.group(1)] = row.group(2)
    return rows


def section(page: str, heading: str) -> dict[str, str]:
    rows = tables(page).get(heading)
    assert rows, f"docs/{page} has no table under '## {heading}'"
    return rows


def mapping_keys(text: str) -> dict[str, set[str]]:
    """The keys of each `{kind: K, a, b: ...}` span in a row, by its kind ('' where it names none)."""
    spans = {}
    for span in re.findall(r"`\{([^}`]*)\}`", text):
        parts = [part.strip() for part in span.split(",")]
        keys = {part.split(":")[0].strip() for part in parts}
        kind = next((part.split(":", 1)[1].strip() for part in parts if part.startswith("kind:")), "")
        spans.setdefault(kind, set()).update(keys)
    return spans


def spans(text: str) -> set[str]:
    return set(CODE_SPAN.findall(text))


def words(text: str) -> set[str]:
    return set(re.findall(r"[\w.-]+", text))


def command_lines(text: str) -> list[str]:
    """The `servesim ...` lines of a page: in its code blocks and its inline code."""
    fenced = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    lines = [line.strip() for block in fenced for line in block.splitlines()]
    lines += [span for span in CODE_SPAN.findall(re.sub(r"```.*?```", "", text, flags=re.S))]
    return [line for line in lines if line.startswith("servesim ")]


def command_sections() -> dict[str, str]:
    """docs/commands.md by command: from its `**`servesim X`**` paragraph to the next one or the next heading."""
    parts = re.split(r"^\*\*`servesim ([a-z]+)`\*\*|^(?=#)", read("commands.md"), flags=re.M)
    found: dict[str, str] = {}
    for name, text in zip(parts[1::2], parts[2::2]):
        if name is not None:
            found[name] = text
    return found


# --- experiment configs -------------------------------------------------------------------------------------------
def test_every_experiment_key_is_documented_and_every_documented_one_accepted():
    documented = set(section("config.md", "Experiment keys"))
    assert documented == experiment_keys(no_such_key=1)


def test_every_workload_key_is_documented_and_every_documented_one_accepted():
    documented = {key.removeprefix("workload.") for key in section("config.md", "The workload section")}
    assert documented == experiment_keys(workload={"no_such_key": 1})
    prompt = section("config.md", "The workload section")["workload.system_prompt"]
    assert mapping_keys(prompt)[""] == experiment_keys(workload={"system_prompt": {"tokens": 8, "no_such_key": 1}})


def test_every_system_key_is_documented_and_every_documented_one_accepted():
    valid = experiment_keys(systems=[{"preset": "vllm", "no_such_key": 1}])
    table = set(section("config.md", "System keys"))
    row = section("config.md", "Experiment keys")["systems"]
    from engine.core.system import PRESETS

    presets = set(PRESETS)
    assert table <= valid
    assert spans(row) - presets <= valid, "the systems row names a key no system accepts"
    assert valid <= table | spans(row), "a system key is in neither the System keys table nor the systems row"


def test_every_cost_model_key_is_documented_and_every_documented_one_accepted():
    row = section("config.md", "Experiment keys")["cost_model"]
    for kind in ("roofline", "profile", "transfer"):
        valid = cost_model_keys(kind)
        assert valid <= words(row), f"a {kind} cost model's key is not in the cost_model row"
        assert mapping_keys(row).get(kind, set()) <= valid, f"the cost_model row gives a {kind} key it refuses"
    assert set(available_host_models()) <= spans(row), "a shipped host model is missing from the cost_model row"


def test_the_precision_keys_are_documented():
    row = section("config.md", "Experiment keys")["precision"]
    assert mapping_keys(row)[""] == experiment_keys(precision={"no_such_key": "fp8"})


def test_every_shipped_gpu_is_listed_and_every_listed_one_shipped():
    row = section("config.md", "Experiment keys")["hardware"]
    listed = {span for span in spans(row) if "/" not in span}
    assert listed == shipped(HARDWARE_DIR)


def test_every_hardware_file_key_is_documented():
    documented = set(section("config.md", "Hardware files"))
    assert documented == accepted(lambda: hardware_from_dict({"no_such_key": 1}, "gpu.yaml"))


# --- validation configs -------------------------------------------------------------------------------------------
def test_every_validation_key_is_documented_and_every_documented_one_accepted():
    rows = set(section("config.md", "Validation configs"))
    top = {key for key in rows if "." not in key}
    assert top == accepted(lambda: validation_from_dict({"no_such_key": 1}, "val.yaml", REPO))
    assert {k.removeprefix("validation.") for k in rows if k.startswith("validation.")} == accepted(
        lambda: options_from_dict({"no_such_key": 1}, "val.yaml"))
    assert {k.removeprefix("engine.") for k in rows if k.startswith("engine.")} == accepted(
        lambda: engine_options_from_dict({"no_such_key": 1}, "val.yaml"))
    assert rows == top | {k for k in rows if k.split(".")[0] in ("validation", "engine")}


# --- models -------------------------------------------------------------------------------------------------------
def test_every_shipped_model_is_listed_and_every_listed_one_shipped():
    names = set()
    shipped_table = read("models.md").split("\n## ")[0]  # the page's first table, before its sections
    for line in shipped_table.splitlines():
        if line.startswith("| `"):
            names |= spans(line.split("|")[1])
    assert names == shipped(MODELS_DIR)
    in_config = spans(section("config.md", "Experiment keys")["model"])
    assert in_config <= shipped(MODELS_DIR), "the config reference's model row names a model not shipped"


def test_every_model_file_key_is_documented():
    documented = set(section("models.md", "Model files"))
    assert documented == accepted(lambda: model_spec_from_dict({"no_such_key": 1}, "model.yaml"))


# --- commands -----------------------------------------------------------------------------------------------------
def test_every_command_is_documented_and_every_documented_one_exists():
    found = commands()
    lines = command_lines(read("commands.md"))
    for words_ in found:
        assert any(line == f"servesim {' '.join(words_)}" or line.startswith(f"servesim {' '.join(words_)} ")
                   for line in lines), f"servesim {' '.join(words_)} is not in docs/commands.md"
    for line in lines:
        first, *rest = line.split()[1:] + [""]
        assert (first,) in found, f"docs/commands.md runs {line!r}: no command {first!r}"
        subcommands = {w[1] for w in found if len(w) == 2 and w[0] == first}
        if subcommands and rest[0]:  # `servesim trace` alone names the group
            assert rest[0] in subcommands, f"docs/commands.md runs {line!r}: {first} has {sorted(subcommands)}"
    assert set(command_sections()) == {w[0] for w in found}, "each command has its paragraph in docs/commands.md"


def test_every_option_is_documented_with_its_command_and_every_documented_one_exists():
    found, sections = commands(), command_sections()
    for words_, parser in found.items():
        missing = sorted(o for o in options(parser) if not re.search(re.escape(o) + r"(?![\w-])", sections[words_[0]]))
        assert missing == [], f"servesim {' '.join(words_)}: {missing} not in its paragraph of docs/commands.md"
    for name, text in sections.items():
        known = set().union(*(options(parser) for words_, parser in found.items() if words_[0] == name))
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        written = {o for span in CODE_SPAN.findall(prose) for o in OPTION.findall(span)}
        written |= {o for line in command_lines(text) for o in OPTION.findall(line)}
        assert written - GLOBAL_OPTIONS <= known, f"servesim {name}: docs/commands.md gives options it refuses"


def test_every_capacity_target_is_documented_and_every_documented_one_exists():
    paragraph = re.search(r"^Targets: (.*?)\. ", read("commands.md"), flags=re.M | re.S)
    assert paragraph, "docs/commands.md has no 'Targets:' list"
    assert spans(paragraph.group(1)) == set(TARGET_METRICS)
