"""Small Pallas Mosaic GPU kernels for the demo, the tutorials and the tests.

Each builder returns `(fn, args)`: call `fn(*args)` to run the kernel in GPU
interpret mode on the CPU.
"""

from __future__ import annotations

from .deadlock import barrier_handshake_in_branch
from .kernels import (
    barrier_in_branch,
    clean_collective,
    collective_in_branch,
    collective_in_branch_nonzero,
    hoisted_collective,
    mismatched_collective_shapes,
    missing_collective_axes,
)
from .races import race_after_divergent_collective, unsynchronized_handoff

__all__ = [
    "barrier_handshake_in_branch", "barrier_in_branch", "clean_collective", "collective_in_branch",
    "collective_in_branch_nonzero", "hoisted_collective", "missing_collective_axes",
    "mismatched_collective_shapes", "race_after_divergent_collective", "unsynchronized_handoff",
]
