"""Run a body of the launch-shape harness traced and take its one error root cause."""

from __future__ import annotations

from pallas_viz.examples import shapes as sh


def single_error_root(body, shape: str, **launch_kw):
    """(trace, root): `body` launched in `shape` (`sh.launch`) and run traced; the run must
    have exactly one error finding, its root cause."""
    fn, args = sh.launch(body, shape, **launch_kw)
    tr, _ = sh.run_traced(fn, args)
    errors = [f for f in tr.findings if f.severity == "error"]
    assert len(errors) == 1, tr.summary()
    return tr, errors[0]
