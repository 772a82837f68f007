"""Merge per-block diagnoses of the same bug into one finding per source line."""

from __future__ import annotations

import dataclasses

from ..model import Cell, Finding, SourceLocation


@dataclasses.dataclass
class _Group:
    kind: str
    severity: str
    kernel: int
    source: SourceLocation | None
    make_message: object
    suggestion: str
    cells: list = dataclasses.field(default_factory=list)
    events: list = dataclasses.field(default_factory=list)
    related: list = dataclasses.field(default_factory=list)
    details: list = dataclasses.field(default_factory=list)
    cell_set: set = dataclasses.field(default_factory=set)
    missing: dict = dataclasses.field(default_factory=dict)
    parts_at_branch: bool = True


class FindingGroups:
    """Collects diagnoses keyed by (kind, kernel, key) and emits merged findings."""

    def __init__(self):
        self._groups: dict[tuple, _Group] = {}

    def add(self, kind: str, severity: str, kernel: int, key, source: SourceLocation | None,
            cells: list[Cell], events: list[int], make_message, suggestion: str,
            related: list[SourceLocation] = (), detail=None,
            missing: list[tuple[Cell, int | None]] = (), parts_at_branch: bool = True) -> None:
        """`make_message(details, cells)` builds the text once all parts are merged;
        `parts_at_branch`: see `Finding.parts_at_branch`."""
        g = self._groups.get((kind, kernel, key))
        if g is None:
            g = self._groups[(kind, kernel, key)] = _Group(
                kind, severity, kernel, source, make_message, suggestion,
                parts_at_branch=parts_at_branch)
        _absorb(g, cells, events, related, missing)
        if detail is not None:
            g.details.append(detail)

    def keys(self, kind: str) -> list[tuple]:
        """(kernel, key) of each group of `kind`, in the order they were made."""
        return [(k, key) for (kd, k, key) in self._groups if kd == kind]

    def details(self, kind: str, kernel: int, key) -> list:
        return self._groups[(kind, kernel, key)].details

    def merge(self, kind: str, kernel: int, key, into) -> None:
        """Fold group `key` into group `into` (its cells, events, related lines and missing
        cells; `into`'s message details, severity and advice stay)."""
        g = self._groups.pop((kind, kernel, key))
        _absorb(self._groups[(kind, kernel, into)], g.cells, g.events, g.related,
                g.missing.items())

    def findings(self) -> list[Finding]:
        out = []
        for g in self._groups.values():
            out.append(Finding(
                kind=g.kind, severity=g.severity, message=g.make_message(g.details, g.cells),
                cells=sorted(g.cells, key=_cell_key), events=sorted(set(g.events)), source=g.source,
                related=g.related, suggestion=g.suggestion, kernel=g.kernel,
                missing=sorted(g.missing.items(), key=lambda m: _cell_key(m[0])),
                parts_at_branch=g.parts_at_branch,
            ))
        return out


def _absorb(g: _Group, cells, events, related, missing) -> None:
    """Add cells (once each, in order), events, related lines (not the group's own line)
    and missing cells (the first place given for each) to `g`."""
    seen = g.cell_set
    for c in cells:
        if c not in seen:
            seen.add(c)
            g.cells.append(c)
    g.events.extend(events)
    for r in related:
        if r is not None and r not in g.related and r != g.source:
            g.related.append(r)
    for cell_, seq in missing:
        g.missing.setdefault(cell_, seq)


def _cell_key(cell: Cell) -> tuple:
    from .context import cell_key

    return cell_key(cell)
