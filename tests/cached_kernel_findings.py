"""Trace kernels JAX compiled before the trace, then the same kernels traced afresh.

    python tests/cached_kernel_findings.py MODULE BODY RUNS SHAPE [SHAPE ...]

MODULE is a test module of this directory, BODY a body of it for
`pallas_viz.examples.shapes.launch`. In a fresh process (no axis name noted yet, no
kernel compiled): each shape's kernel is `jax.jit`-ed and run three times outside any
trace (JAX traces it, twice, and caches it), then run traced RUNS times; then, after
`jax.clear_caches()`, each is run traced once more (JAX traces it again, inside the
trace), then RUNS times again (cached again, with its axis names noted). One JSON line:
{"cached": {shape: [run: [finding]]}, "fresh": {shape: [finding]}, "again": {shape:
[run: [finding]]}, "thread_axis": {shape: [cached, fresh, again]}, "traced": {shape:
[cached, fresh, again]}},
a finding as [kind, severity, line, branch line, branch axes, message, suggestion,
threads of its cells]; "traced": how many scopes the GPU interpreter traced during the
phase's traced runs (0: the kernel was cached).
"""

from __future__ import annotations

import importlib
import json
import os
import sys


def _findings(tr) -> list:
    return [[f.kind, f.severity, f.source.line if f.source else None,
             f.branch.line if f.branch else None, list(f.branch.axes or ()) if f.branch else None,
             f.message, f.suggestion, sorted({t for _, _, t in f.cells}), _branch_views(tr, i)]
            for i, f in enumerate(tr.findings)]


def _branch_views(tr, i: int) -> dict:
    """How the views name finding `i`'s branch: the text view's line for it, the HTML
    snapshot's label for it, the widget payload's role, the PNG's line for it."""
    from pallas_viz.render.html import static_snapshot
    from pallas_viz.render.payload import build_state
    from pallas_viz.render.png import root_lines
    from pallas_viz.render.text import render_finding

    f = tr.findings[i]
    if f.branch is None:
        return {}
    text = [ln.strip() for ln in render_finding(f, tr, color=False).splitlines()
            if ln.strip().startswith("=") and f":{f.branch.line}" in ln]
    html = static_snapshot(tr)
    return {"text": text, "html": [label for label in ("threads part here",
                                                       "branch here (its axis not known)")
                                   if f"<b>{label}:</b>" in html],
            "payload": build_state(tr)["meta"]["findings"][i]["branch"]["role"],
            "png": [text.strip() for text, _, gid in root_lines(tr, f.kernel)
                    if gid.endswith("-branch")]}


def main(module: str, body: str, runs: int, shapes: list[str]) -> None:
    import jax
    from jax._src.pallas.mosaic_gpu.interpret import jaxpr_interpret as jxi

    from pallas_viz.examples import shapes as sh

    traced = [0]  # scopes the interpreter traces (a kernel JAX traces, not a cached one)
    original = jxi.JaxprInterpreter._interpret_run_scoped_p

    def counted(*a, **kw):
        traced[0] += 1
        return original(*a, **kw)

    jxi.JaxprInterpreter._interpret_run_scoped_p = counted
    fn_body = getattr(importlib.import_module(module), body)
    kernels = {}
    for shape in shapes:
        fn, args = sh.launch(fn_body, shape)
        fn = jax.jit(fn)
        for _ in range(3):  # traced and cached by JAX, outside any trace
            jax.block_until_ready(fn(*args))
        kernels[shape] = fn, args
    out: dict = {"cached": {}, "fresh": {}, "again": {}, "thread_axis": {}, "traced": {}}
    for shape, (fn, args) in kernels.items():  # before any of them is traced afresh
        out["cached"][shape] = []
        traced[0] = 0
        for _ in range(runs):
            tr, _ = sh.run_traced(fn, args)
            out["cached"][shape].append(_findings(tr))
        out["thread_axis"][shape] = [tr.kernels[0].thread_axis]
        out["traced"][shape] = [traced[0]]
    jax.clear_caches()
    for shape, (fn, args) in kernels.items():
        traced[0] = 0
        tr, _ = sh.run_traced(fn, args)
        out["fresh"][shape] = _findings(tr)
        out["thread_axis"][shape].append(tr.kernels[0].thread_axis)
        out["traced"][shape].append(traced[0])
    for shape, (fn, args) in kernels.items():  # cached again, by JAX, since
        out["again"][shape] = []
        traced[0] = 0
        for _ in range(runs):
            tr, _ = sh.run_traced(fn, args)
            out["again"][shape].append(_findings(tr))
        out["thread_axis"][shape].append(tr.kernels[0].thread_axis)
        out["traced"][shape].append(traced[0])
    sh.drain_effects()
    print(json.dumps(out), flush=True)


def run(module: str, body: str, runs: int, shapes: list[str]) -> dict:
    """`main` in a fresh Python process: its printed dict."""
    from script_json import printed_json

    return printed_json([sys.executable, os.path.abspath(__file__), module, body, str(runs),
                         *shapes], timeout=600)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:])
