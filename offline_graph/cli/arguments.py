"""Command-line helpers shared by the pipelines: --help text from config docstrings, JSON args."""

from __future__ import annotations

from typing import TYPE_CHECKING

import argparse
import ast
import inspect
import itertools
import json
import textwrap

if TYPE_CHECKING:
    from offline_graph.data.errors import OfflineGraphError


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass ``cls`` (used as the --help text)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def json_object(text: str) -> dict:
    """argparse type: a JSON object (e.g. ``--env-config '{"n_max": 128}'``)."""
    try:
        value = json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"must be a JSON object (found {text!r}: {err})") from err
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object (found {type(value).__name__})")
    return value


def bad_value(prog: str, cfg: object, name: str, expected: str, hint: str) -> "OfflineGraphError":
    """``<prog>: --<name> must be <expected> (found <value>). <hint>`` as a ConfigError."""
    from offline_graph.data.errors import ConfigError

    return ConfigError(
        f"{prog}: --{name.replace('_', '-')} must be {expected} "
        f"(found {getattr(cfg, name)!r}). {hint}"
    )
