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


def assert_takes_turns_root(body, shape: str, runs: int) -> None:
    """`body`'s threads take turns at a collective scope under a branch on the thread index
    (its lines marked IN_TURN and TAKES_TURNS): in each of `runs` runs, one
    `partial_collective` root at the scope's line, its branch at the branch's line reading
    the thread axis "w", the hoist advice, both threads' cells; the same message every
    run."""
    in_turn = sh.marked_line(body, "IN_TURN")
    takes_turns = sh.marked_line(body, "TAKES_TURNS")
    seen = set()
    for _ in range(runs):
        tr, root = single_error_root(body, shape)
        assert root.kind == "partial_collective", tr.summary()
        assert root.source.line == in_turn and root.branch.line == takes_turns
        assert root.branch.axes == ("w",)
        assert "hoist it out of the thread-dependent branch" in root.suggestion
        assert {t for _, _, t in root.cells} == {0, 1}
        seen.add((root.message, root.source.line))
    assert len(seen) == 1, seen


def assert_takes_turns_on_two_devices(module: str, body, runs: int) -> None:
    """The same bug on two devices (`two_devices_roots`, a fresh process): one root at the
    scope's line every run, its message naming the branch on the thread index."""
    import two_devices_roots

    kind, line, message = two_devices_roots.one_root(module, body.__name__, 2, runs)
    assert kind == "partial_collective"
    assert line == sh.marked_line(body, "IN_TURN"), message
    assert "inside a branch (`pl.when` on the thread index)" in message, message


def assert_stays_clean(body, shape: str, runs: int = 2) -> None:
    """`body` (a fix) launched in `shape` and run traced `runs` times: no finding, no
    failure."""
    for _ in range(runs):
        fn, args = sh.launch(body, shape)
        tr, _ = sh.run_traced(fn, args)
        assert tr.findings == [] and tr.failure is None, tr.summary()
