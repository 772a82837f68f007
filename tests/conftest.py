"""Shared fixtures: traces of the bundled example kernels, each run once per session."""

from __future__ import annotations

import pytest

import pallas_viz as pv
from pallas_viz import _jax as adapter
from pallas_viz import examples as ex


def ipython_shell():
    """The test IPython shell: one singleton for every test file, in any order."""
    import IPython
    from IPython.testing.globalipapp import start_ipython

    return start_ipython() or IPython.get_ipython()


def run_traced(builder, raise_errors=False, **kw):
    fn, args = builder(**kw)
    with pv.trace(raise_errors=raise_errors) as tr:
        fn(*args)
    return tr


@pytest.fixture(scope="session")
def example_traces():
    """name -> Trace for every small example kernel (failures kept quiet)."""
    names = ["clean_collective", "collective_in_branch", "hoisted_collective",
             "collective_in_branch_nonzero", "mismatched_collective_shapes",
             "barrier_in_branch", "missing_collective_axes"]
    return {n: run_traced(getattr(ex, n)) for n in names}


@pytest.fixture(autouse=True)
def no_hooks_left_behind():
    yield
    assert not adapter.hooks_installed(), "a test left pallas_viz hooks installed"
