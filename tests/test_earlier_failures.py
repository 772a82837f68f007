"""A kernel that fails on two devices, then the next run in the same process.

With several devices JAX keeps a failed kernel's other errors in its runtime tokens and
raises them from the next call, before that call's kernel starts. Before, the next
`pv.trace()` caught that old error and said "no Pallas GPU kernel ran in interpret mode
... run the kernel with interpret=plgpu.InterpretGPUParams()": wrong twice. Now a block
in which no kernel ran because of an earlier failure says so, with what to do (JAX 0.12:
`jax.effects_barrier()` clears it; 0.11 keeps it for the process), whether the failed
run was traced or not. (Clearing it at the end of the failed trace was tried: after a
two-device deadlock the next clean kernel then sometimes failed with "Barrier remains
allocated", so pallas_viz leaves JAX's tokens alone.)
"""

from __future__ import annotations

import os
import sys

import jax
import pytest
from script_json import printed_json

import pallas_viz as pv
from pallas_viz.store import EventTable

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "earlier_failure_two_devices.py")
JAX_011 = jax.__version__.startswith("0.11.")
EARLIER = ("pallas_viz: no kernel ran in this block. The error that left it is an earlier "
           "kernel run's failure (AssertionError: Barrier remains allocated at key ")


def _run(mode: str) -> list:
    return printed_json([sys.executable, SCRIPT, mode])


@pytest.mark.parametrize("mode", ["traced", "untraced"])
def test_an_earlier_failure_is_named_as_such(mode):
    first, summary, left, earlier = _run(mode)
    assert first == (["partial_collective"] if mode == "traced" else []) and left
    assert earlier.startswith("AssertionError: Barrier remains allocated at key ")
    assert summary.startswith(EARLIER), summary
    assert "no Pallas GPU kernel ran" not in summary and "InterpretGPUParams" not in summary
    if JAX_011:
        assert summary.endswith("JAX 0.11 raises it at every later call of this process: "
                                "restart the process (the notebook's kernel), then run the "
                                "kernel again."), summary
    else:
        assert summary.endswith("Call `jax.effects_barrier()` once after a failed run (it "
                                "raises that error and clears it), then run the kernel "
                                "again."), summary


def test_the_words_are_only_for_a_block_where_no_kernel_ran(example_traces):
    tr = example_traces["collective_in_branch"]
    tr.meta["earlier_failure"] = "AssertionError: old"
    try:
        assert "earlier kernel run's failure" not in tr.summary()
    finally:
        del tr.meta["earlier_failure"]
    empty = pv.Trace(EventTable.empty(), [], [])
    empty.meta["earlier_failure"] = "AssertionError: old \x1b[31mred"
    text = empty.summary()
    assert text.startswith("pallas_viz: no kernel ran in this block.") and "\x1b" not in text
