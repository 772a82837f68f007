"""Shared fixtures: traces of the bundled example kernels, each run once per session."""

from __future__ import annotations

import pytest

import pallas_viz as pv
from pallas_viz import _jax as adapter
from pallas_viz import examples as ex

# Multi-second tests of files that carry no `slow` mark of their own: each runs a real
# kernel from jax.experimental.pallas.ops.gpu or starts a Jupyter kernel. The fast run,
# `pytest -m "not browser and not slow"`, leaves them out; `scripts/dev test` runs them.
SLOW_TESTS = (
    "test_notebooks.py::test_notebook_executes",  # a Jupyter kernel per notebook; 03: matmul
    "test_benchmarks.py::test_tiny_run_writes_well_formed_results",  # the smallest real kernel
)


@pytest.fixture(scope="session", autouse=True)
def _sigint_handled():
    """Ctrl-C reaches Python in every test run. A shell starts a background command
    (`cmd &`, `nohup`) with SIGINT ignored, and Python then leaves it ignored: the tests
    that interrupt a kernel (`_thread.interrupt_main`, SIGINT to this process or a child)
    would wait forever for an interrupt that never comes. Installed for the session only
    when it is ignored."""
    import signal

    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.split("/")[-1].split("[")[0].endswith(SLOW_TESTS):
            item.add_marker(pytest.mark.slow)


def ipython_shell():
    """The test IPython shell: one singleton for every test file, in any order."""
    import IPython
    from IPython.testing.globalipapp import start_ipython

    return start_ipython() or IPython.get_ipython()


@pytest.fixture(scope="module")
def shell():
    """The IPython shell with `%load_ext pallas_viz` done, displays captured, and a failing
    (`failing(*fa)`) and a clean (`clean(*ca)`) example kernel in its namespace."""
    from IPython.core.displaypub import CapturingDisplayPublisher

    ip = ipython_shell()
    old = ip.display_pub
    ip.display_pub = CapturingDisplayPublisher()
    ip.run_line_magic("load_ext", "pallas_viz")
    ip.run_cell("from pallas_viz import examples as ex\n"
                "failing, fa = ex.mismatched_collective_shapes()\n"
                "clean, ca = ex.clean_collective(grid=(1,))")
    yield ip
    ip.display_pub = old


@pytest.fixture
def ip(shell):
    """`shell` with no captured output and no trace variables left by an earlier test."""
    shell.display_pub.clear_output()
    for name in ("tr", "tr2", "y"):
        shell.user_ns.pop(name, None)
    return shell


def first_barrier_allocation(tr) -> int:
    """The allocation (lifetime) id of the first barrier a trace created."""
    from pallas_viz.store import OP_CODE, RESOURCE_CODE

    c = tr.events.columns
    rows = (c["resource"] == RESOURCE_CODE["barrier"]) & (c["op"] == OP_CODE["create"])
    return int(c["allocation"][rows.nonzero()[0][0]])


def run_traced(builder, raise_errors=False, **kw):
    fn, args = builder(**kw)
    with pv.trace(raise_errors=raise_errors) as tr:
        fn(*args)
    return tr


@pytest.fixture(scope="module")
def playwright_browser():
    """Debian's Chromium driven by Playwright (the browser tests'; skipped without it), one
    per test module: a test opens its own pages (`browser.new_page()`, each in a context of
    its own) and closes them."""
    from browser_util import launch_chromium, require_chromium

    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def example_traces():
    """name -> Trace for every small example kernel (failures kept quiet)."""
    names = ["clean_collective", "collective_in_branch", "hoisted_collective",
             "collective_in_branch_nonzero", "mismatched_collective_shapes",
             "barrier_in_branch", "missing_collective_axes"]
    return {n: run_traced(getattr(ex, n)) for n in names}


@pytest.fixture(scope="session")
def hopper():
    """The real warp-specialised Hopper matmul (`examples.ops.hopper_matmul`), traced once."""
    from pallas_viz.examples import ops

    return run_traced(ops.hopper_matmul, raise_errors=True)


@pytest.fixture(autouse=True)
def no_hooks_left_behind():
    yield
    assert not adapter.hooks_installed(), "a test left pallas_viz hooks installed"
