"""Command-line helpers shared by the jobs: the argparse parser of a config dataclass.

Each job states its settings once, as a frozen dataclass with a docstring under every field;
:func:`parser_for` derives the ``--field-name`` options from it (type, default, choices and
--help text) and :func:`config_from` turns the parsed namespace back into the dataclass. A
numeric field's allowed range is stated next to it too (``field(metadata=bounded(...))``) and
checked by :func:`check_bounds`.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import json
import textwrap
import types
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Literal,
    Sequence,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from offline_graph.data.errors import ConfigError

C = TypeVar("C", bound="DataclassInstance")
CLI = "cli"
"""The key of a field's metadata that holds :func:`arg`'s settings."""


def arg(*, positional: bool = False, **kwargs: Any) -> dict[str, Any]:
    """``dataclasses.field(metadata=arg(...))``: what a field's type and default cannot say.

    ``positional=True`` makes the field a positional argument; every other keyword is passed
    to ``ArgumentParser.add_argument`` and overrides the derived one (e.g. ``metavar="CASE"``,
    ``choices=[...]``, or ``default=None`` for a command-line default that differs from the
    dataclass default).
    """
    return {CLI: {"positional": positional, **kwargs}}


BOUND = "bound"
"""The key of a field's metadata that holds its :class:`Bound`."""


@dataclasses.dataclass(frozen=True)
class Bound:
    """The allowed range of a numeric option (``None`` values are not checked)."""

    low: float
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    hint: str = ""

    def allows(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        if self.high is None:
            return above
        return above and (value < self.high if self.high_open else value <= self.high)

    @property
    def expected(self) -> str:
        """``>= 1``, ``> 0``, ``in [0, 1]``, ``in [0, 1)``: the ``<expected>`` of the message."""
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"in {left}{self.low:g}, {self.high:g}{right}"


def bounded(low: float, high: float | None = None, *, hint: str, **kwargs: Any) -> dict[str, Any]:
    """``dataclasses.field(metadata=bounded(1, hint=...))``: the field's :class:`Bound`
    (``low_open`` / ``high_open`` keywords for strict limits)."""
    return {BOUND: Bound(low, high, hint=hint, **kwargs)}


def check_bounds(prog: str, cfg: DataclassInstance) -> None:
    """Raise :func:`bad_value`'s ConfigError for the first field outside its :class:`Bound`."""
    for f in dataclasses.fields(cfg):
        bound, value = f.metadata.get(BOUND), getattr(cfg, f.name)
        if bound is not None and value is not None and not bound.allows(value):
            raise bad_value(prog, cfg, f.name, bound.expected, bound.hint)


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass ``cls`` and of the dataclasses it extends
    (used as the --help text; a subclass's own docstring wins)."""
    docs: dict[str, str] = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    """The docstrings under the fields that the source of ``cls`` itself states."""
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


def bad_value(prog: str, cfg: object, name: str, expected: str, hint: str) -> ConfigError:
    """``<prog>: --<name> must be <expected> (found <value>). <hint>`` as a ConfigError."""
    from offline_graph.data.errors import ConfigError

    return ConfigError(
        f"{prog}: --{name.replace('_', '-')} must be {expected} (found {getattr(cfg, name)!r}). {hint}"
    )


def _without_none(hint: Any) -> Any:
    """``X | None`` -> ``X`` (other hints unchanged)."""
    if get_origin(hint) in (Union, types.UnionType):
        rest = [a for a in get_args(hint) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return hint


def _default(f: dataclasses.Field) -> Any:
    """The default of field ``f`` (``default_factory()`` called), or ``MISSING``."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def field_argument(cls: type, f: dataclasses.Field, hint: Any, doc: str | None) -> tuple[str, dict[str, Any]]:
    """(name or flag, ``add_argument`` keywords) of field ``f`` annotated ``hint``.

    ``bool`` is a flag (``store_true`` when the default is False, else ``--x/--no-x``);
    ``int``/``float`` set ``type``; ``dict`` is a JSON object (:func:`json_object`);
    ``Literal[...]`` gives ``choices``; ``list[X]``/``tuple[X, ...]`` take one or more values
    (zero or more when positional); ``X | None`` is ``X`` with the default None.
    """
    extra = dict(f.metadata.get(CLI, {}))
    positional = extra.pop("positional", False)
    default = _default(f)
    base = _without_none(hint)
    kw: dict[str, Any] = {"help": doc}
    if base is bool:
        kw["action"] = "store_true" if default is False else argparse.BooleanOptionalAction
    else:
        if get_origin(base) in (list, tuple):
            kw["nargs"] = "*" if positional else "+"
            base = get_args(base)[0]
        if get_origin(base) is Literal:
            kw["choices"] = get_args(base)
            if not all(isinstance(c, str) for c in kw["choices"]):
                kw["type"] = type(kw["choices"][0])
        elif base is dict or get_origin(base) is dict:
            kw["type"] = json_object
        elif base in (int, float):
            kw["type"] = base
        elif base is not str and "type" not in extra:
            raise TypeError(
                f"{cls.__name__}.{f.name}: no command-line form of {hint!r}; give one with "
                "dataclasses.field(metadata=arg(type=...))."
            )
    if default is not dataclasses.MISSING:
        kw["default"] = default
    elif not positional:
        kw["required"] = True
    kw.update(extra)
    return (f.name if positional else "--" + f.name.replace("_", "-")), kw


def add_fields(parser: argparse.ArgumentParser, cls: type[DataclassInstance]) -> None:
    """One argument per field of dataclass ``cls``, in field order (see :func:`field_argument`)."""
    docs = field_docs(cls)
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        name, kw = field_argument(cls, f, hints[f.name], docs.get(f.name))
        if name.startswith("--"):
            kw["dest"] = f.name
        parser.add_argument(name, **kw)


def parser_for(
    cls: type[DataclassInstance],
    prog: str,
    description: str | None,
    formatter_class: type[argparse.HelpFormatter] = argparse.ArgumentDefaultsHelpFormatter,
) -> argparse.ArgumentParser:
    """The ``argparse`` parser of dataclass ``cls``: ``--field-name`` per field, required when
    the field has no default, help from the field's docstring (:func:`field_docs`)."""
    parser = argparse.ArgumentParser(prog=prog, description=description, formatter_class=formatter_class)
    add_fields(parser, cls)
    return parser


def parse_config(
    parser: argparse.ArgumentParser,
    cls: type[C],
    argv: Sequence[str] | None,
    check: Callable[[C], None] | None = None,
) -> C:
    """Parse ``argv`` into ``cls`` and run ``check`` on it; a ConfigError exits with status 2
    and its message, like argparse's own errors."""
    from offline_graph.data.errors import ConfigError

    cfg = config_from(cls, parser.parse_args(argv))
    try:
        if check is not None:
            check(cfg)
    except ConfigError as err:
        parser.error(str(err))
    return cfg


def run_job(prog: str, run: Callable[[C], object], cfg: C) -> int:
    """``run(cfg)`` as a command's exit status: 0, or 2 with ``offline-graph <prog>: <message>``
    on stderr for an offline_graph error (bad data or settings found while running; see
    :mod:`offline_graph.cli.failures`)."""
    from offline_graph.cli.failures import report_error
    from offline_graph.data.errors import OfflineGraphError

    try:
        run(cfg)
    except OfflineGraphError as err:
        return report_error(prog, err)
    return 0


def config_from(cls: type[C], ns: argparse.Namespace) -> C:
    """The ``cls`` instance of a namespace parsed by :func:`parser_for` (the values of
    ``tuple`` fields made tuples)."""
    hints = get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        value = getattr(ns, f.name)
        if isinstance(value, list) and get_origin(_without_none(hints[f.name])) is tuple:
            value = tuple(value)
        values[f.name] = value
    return cls(**values)
