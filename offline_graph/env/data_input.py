"""The input of a data command, resolved once: :class:`DataInput`.

``convert``, ``train`` and ``evaluate --data`` make one at their start (:func:`open_input`;
``evaluate``: listed on first use) and hand it to every later step (the conversion job,
``configure``, ``estimate_value``, the multi-agent paths); ``inspect``, which reads every file
whole anyway, makes its scan while reading (:class:`offline_graph.data.store.files.ScanBuilder`,
:meth:`DataInput.of`). No step lists or opens the input again to learn what is known already:

* the listed and checked files (:class:`~offline_graph.data.store.files.FileScan`: usable files,
  their footers' row groups and sizes, the files rejected by reason), listed and opened once;
* their metadata (the first usable file's) and kind (``episodes`` / ``transitions``);
* single- or multi-agent (:attr:`DataInput.multi_agent`: the metadata, else the first row,
  read through the scan's kept first rows);
* the spaces and where they came from (:meth:`DataInput.resolve_spaces`,
  :mod:`offline_graph.env.data_spaces`; multi-agent: :meth:`DataInput.resolve_agent_spaces`),
  inferred, when they must be, from the same kept rows;
* the env to evaluate in (:attr:`DataInput.env`, from the resolved spaces).

Functions that took a location keep taking one; given a ``DataInput`` they use it instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from offline_graph.data.store.files import FileScan, scan_files
from offline_graph.data.analysis.ma_stats import AgentSpaces, is_multi_agent_data, resolve_agent_spaces
from offline_graph.env.data_spaces import ResolvedSpaces, resolve_spaces


@dataclass
class DataInput:
    """One data command's input, listed and checked once (module doc)."""

    location: Any
    """The input as given: a path, a URI or a list of them."""
    on_error: Literal["raise", "skip"] = "raise"
    """How the scan treats unusable files: raise, or skip and count them."""
    spaces: ResolvedSpaces | None = None
    """Single-agent spaces, once :meth:`resolve_spaces` has resolved them."""
    agent_spaces: AgentSpaces | None = None
    """Multi-agent per-agent spaces, once :meth:`resolve_agent_spaces` has resolved them."""
    _scan: FileScan | None = field(default=None, repr=False)
    _multi_agent: bool | None = field(default=None, repr=False)

    @property
    def scan(self) -> FileScan:
        """The usable files, their footers and sizes, the rejected files: listed and checked
        on first use (:func:`open_input`: at once), never again."""
        if self._scan is None:
            self._scan = scan_files(self.location, self.on_error)
        return self._scan

    @property
    def files(self) -> list[str]:
        return self.scan.files

    @property
    def metadata(self) -> dict[str, Any]:
        """The offline_graph metadata of the first usable file ({} without files)."""
        return self.scan.metadata or {}

    @property
    def kind(self) -> str | None:
        return self.scan.kind

    @property
    def multi_agent(self) -> bool:
        """Multi-agent episode data (the metadata says so, or the first row is one); decided
        on first use, from the scan's kept first rows."""
        if self._multi_agent is None:
            self._multi_agent = is_multi_agent_data(self.scan, self.metadata)
        return self._multi_agent

    @property
    def env(self) -> str | None:
        """The env to evaluate in (given, else recorded), once the spaces are resolved."""
        return self.spaces.env if self.spaces is not None else None

    @classmethod
    def of(cls, location: Any, scan: FileScan, on_error: Literal["raise", "skip"] = "raise") -> DataInput:
        """The input ``location`` whose files ``scan`` listed and checked already."""
        return cls(location, on_error, _scan=scan)

    def resolve_spaces(self, **options: Any) -> ResolvedSpaces:
        """:func:`offline_graph.env.data_spaces.resolve_spaces` of this input (``options``:
        its keywords but ``input_`` / ``scan`` / ``on_error``); kept in :attr:`spaces`."""
        self.spaces = resolve_spaces(scan=self.scan, **options)
        return self.spaces

    def resolve_agent_spaces(self, who: str) -> AgentSpaces:
        """The per-agent spaces of multi-agent data (the metadata's ``agent_spaces``, else
        inferred from the kept first rows); resolved once, kept in :attr:`agent_spaces`."""
        if self.agent_spaces is None:
            self.agent_spaces = resolve_agent_spaces(self.scan, self.metadata, who)
        return self.agent_spaces


def open_input(input_: Any, on_error: Literal["raise", "skip"] = "raise") -> DataInput:
    """List and check the files of ``input_`` once (a :class:`DataInput` is returned as is)."""
    if isinstance(input_, DataInput):
        return input_
    data = DataInput(input_, on_error)
    data.scan  # noqa: B018 (listed and checked now, in the caller's order of errors)
    return data
