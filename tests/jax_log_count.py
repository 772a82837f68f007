"""An independent count of allocations, read from JAX's own shared-memory log.

JAX's interpreter logs (with `logging_mode=LoggingMode.SHARED_MEMORY`) each buffer
or barrier it creates and each one it frees. Counting those lines gives a tally that
does not go through pallas_viz's hooks at all.
"""

from __future__ import annotations

import contextlib
import logging

from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_viz._jax import SHARED_MEMORY_LOGGER
from pallas_viz.examples.ops import logging_interpret_params

LOGGER = SHARED_MEMORY_LOGGER


def logging_params(**kw) -> plgpu.InterpretGPUParams:
    """InterpretGPUParams with shared-memory logging on."""
    return logging_interpret_params(**kw)


class _Counter(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.counts = {"create": 0, "free": 0}

    def emit(self, record):
        line = record.getMessage()
        if ("`allocate_buffer`" in line and "key=" in line) or (
                "Allocated barrier" in line or "Allocated cluster barrier" in line):
            self.counts["create"] += 1
        elif ("`deallocate_buffer`" in line and "key=" in line) or (
                "Deallocating barrier" in line or "Deallocating cluster barrier" in line):
            self.counts["free"] += 1


@contextlib.contextmanager
def count_jax_log():
    """Yields a dict {"create": n, "free": n} filled from JAX's log while the block runs."""
    logger = logging.getLogger(LOGGER)
    handler = _Counter()
    old_level, old_prop = logger.level, logger.propagate
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        yield handler.counts
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        logger.propagate = old_prop
