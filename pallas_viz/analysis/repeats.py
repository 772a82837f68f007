"""The same root cause in several runs of one kernel: a kernel called in a loop.

Each run of a kernel is analysed on its own, so a buggy kernel called ten times has ten
root causes that read alike. `repeated_roots` groups them for the views that list root
causes: one per mistake, with the kernel runs that showed it.
"""

from __future__ import annotations

from ..model import Finding, KernelInfo


def _loc(s) -> tuple | None:
    return None if s is None else (s.file, s.line, s.column, _loc(s.via))


def _key(f: Finding, kernels: list[KernelInfo]) -> tuple:
    k = kernels[f.kernel] if f.kernel is not None and 0 <= f.kernel < len(kernels) else None
    kernel = None if k is None else (k.name, _loc(k.launch))
    return (kernel, f.kind, f.severity, f.message, _loc(f.source), _loc(f.branch),
            f.suggestion,
            tuple((c.kind, c.severity, c.message, _loc(c.source)) for c in f.consequences))


def root_groups(findings: list[Finding], kernels: list[KernelInfo]) -> list[list[int]]:
    """Each root cause once, in order of first appearance: the indices in `findings` of its
    copies, its own first. Copies have the same kind, message, line, branch, advice and
    consequences, in runs of the same kernel (its name and launch line). A root cause
    outside any kernel run (JAX's rejection) stands alone."""
    out: list[list[int]] = []
    seen: dict[tuple, int] = {}
    for i, f in enumerate(findings):
        if f.kernel is None:
            out.append([i])
            continue
        key = _key(f, kernels)
        at = seen.get(key)
        if at is None:
            seen[key] = len(out)
            out.append([i])
        else:
            out[at].append(i)
    return out


def repeated_roots(findings: list[Finding],
                   kernels: list[KernelInfo]) -> list[tuple[Finding, list[int]]]:
    """Each root cause once (`root_groups`), with the indices of the kernel runs that had
    it (its own first; none for a root cause outside any kernel run)."""
    return [(findings[g[0]], [findings[i].kernel for i in g if findings[i].kernel is not None])
            for g in root_groups(findings, kernels)]
