"""A Griffe extension for the docs site: our docstrings' reST inline markup as Markdown.

The docstrings use reST (``code``, :func:`name`, :class:`~pkg.Name`, ``===`` simple tables);
mkdocstrings renders Markdown. Applied to every object's docstring as Griffe loads it
(``mkdocs.yml``: ``extensions: [tools/griffe_rst.py:RstInline]``); the source is unchanged.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj):`(~?)([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")
_RULE = re.compile(r"^\s*=+(\s+=+)+\s*$")


def _role(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def _fence_tables(text: str) -> str:
    """reST simple tables (three ``====  ====`` rules) as fenced text blocks."""
    lines, out, rules = text.split("\n"), [], 0
    for line in lines:
        if _RULE.match(line):
            if rules == 0:
                out.append("```text")
            rules += 1
            out.append(line)
            if rules == 3:
                out.append("```")
                rules = 0
            continue
        out.append(line)
    return "\n".join(out)


def rst_to_markdown(text: str) -> str:
    """Inline reST markup as Markdown: roles and double-backtick literals as code, tables fenced."""
    text = _ROLE.sub(_role, text)
    text = _LITERAL.sub(r"`\1`", text)
    text = re.sub(r"::\n", ":\n", text)  # reST's literal-block marker (the block stays indented)
    return _fence_tables(text)


class RstInline(griffe.Extension):
    """Rewrite each docstring's value once, when Griffe creates the object."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
