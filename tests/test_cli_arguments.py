"""The command-line options derived from the config dataclasses (offline_graph.cli.arguments)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import Literal

import pytest

from offline_graph.cli.arguments import arg, config_from, parser_for
from offline_graph.data.errors import ConfigError

JOBS = {
    "record": "Config",
    "inspect_data": "Config",
    "convert": "Args",
    "train": "Config",
    "evaluate": "Config",
    "finetune": "Config",
    "bench": "Args",
    "migrate": "Config",
}


@dataclass(frozen=True)
class Example:
    """Settings of a test."""

    name: str
    """A required string."""
    count: int = 3
    """An int."""
    rate: float | None = None
    """An optional float."""
    mode: Literal["a", "b"] = "a"
    """A choice."""
    level: Literal["x", "y"] | None = None
    """An optional choice."""
    flag: bool = False
    """A store_true flag."""
    on: bool = True
    """A --on/--no-on flag."""
    kwargs: dict = field(default_factory=dict)
    """A JSON object."""
    items: list[str] = field(default_factory=lambda: ["p"], metadata=arg(choices=["p", "q"]))
    """One or more of p, q."""
    rest: tuple[str, ...] = field(default=(), metadata=arg(positional=True, metavar="REST"))
    """Positional values."""


def parse(*argv: str) -> Example:
    return config_from(Example, parser_for(Example, "t", None).parse_args(list(argv)))


def test_defaults_types_and_flags():
    assert parse("--name", "n") == Example(name="n", items=["p"])
    got = parse(
        "u",
        "v",
        "--name",
        "n",
        "--count",
        "4",
        "--rate",
        "0.5",
        "--mode",
        "b",
        "--level",
        "y",
        "--flag",
        "--no-on",
        "--kwargs",
        '{"k": 1}',
        "--items",
        "q",
        "p",
    )
    assert got == Example("n", 4, 0.5, "b", "y", True, False, {"k": 1}, ["q", "p"], ("u", "v"))


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--name", "n", "--count", "x"],
        ["--name", "n", "--mode", "c"],
        ["--name", "n", "--kwargs", "[1]"],
        ["--name", "n", "--items", "r"],
    ],
)
def test_bad_values_exit_2(argv):
    with pytest.raises(SystemExit) as info:
        parse(*argv)
    assert info.value.code == 2


def test_help_from_field_docstrings():
    text = parser_for(Example, "t", None).format_help()
    assert "A required string. (default: None)" in text and "{a,b}" in text and "[REST ...]" in text


def test_unknown_type_is_refused():
    @dataclass
    class Bad:
        when: complex = 1j
        """No command-line form."""

    with pytest.raises(TypeError, match="Bad.when"):
        parser_for(Bad, "t", None)


@pytest.mark.parametrize("module", sorted(JOBS))
def test_every_job_has_one_option_per_field(module):
    job = importlib.import_module(f"offline_graph.cli.{module}")
    cls = getattr(job, JOBS[module])
    parser = job.build_parser() if hasattr(job, "build_parser") else None
    if parser is None:  # convert and bench build it inside parse_args
        parser = parser_for(cls, module, None)
    dests = {a.dest for a in parser._actions if not isinstance(a, argparse._HelpAction)}
    assert dests == {f.name for f in dataclasses.fields(cls)}
    assert all(a.help for a in parser._actions)


def test_bounds_word_the_expected_range_and_check_each_field():
    from offline_graph.cli.arguments import Bound, check_bounds

    assert [Bound(1).expected, Bound(0.0, low_open=True).expected] == [">= 1", "> 0"]
    assert [Bound(0.0, 1.0).expected, Bound(0.0, 1.0, high_open=True).expected] == ["in [0, 1]", "in [0, 1)"]
    assert (Bound(1).allows(1), Bound(1).allows(0), Bound(0.0, low_open=True).allows(0.0)) == (
        True,
        False,
        False,
    )
    assert (Bound(0.0, 1.0, high_open=True).allows(1.0), Bound(0.0, 1.0).allows(1.0)) == (False, True)
    from offline_graph.cli import train

    ok = train.Config(algo="marwil", data=".", checkpoint="c", beta=None, holdout=0.5)
    check_bounds("train", ok)  # None (beta) is not checked; 0.5 is in [0, 1)
    with pytest.raises(ConfigError) as err:
        check_bounds("train", dataclasses.replace(ok, holdout=1.0))
    assert str(err.value) == (
        "train: --holdout must be in [0, 1) (found 1.0). It is the fraction of episodes kept out of training."
    )
