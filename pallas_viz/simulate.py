"""Simulations of interpreter bugs, for teaching and for testing interpreter changes.

Nothing here happens in a correct JAX: these context managers deliberately break
the GPU interpreter so that you can see what pallas_viz reports when it breaks.
"""

from __future__ import annotations

from ._jax import simulated_device_request_bug


def simulate_nonzero_thread_device_requests():
    """SIMULATION: make the interpreter map device-level requests to a non-zero thread.

    Inside the block, kernels with more than one thread fail with
    ``ValueError: `thread_id` must be zero when allocating a buffer for all threads``,
    the error that guards allocations for all threads. Use it to see (and test) what
    pallas_viz shows for that error::

        with pv.simulate.simulate_nonzero_thread_device_requests():
            with pv.trace(raise_errors=False) as tr:
                kernel(x)
    """
    return simulated_device_request_bug()


__all__ = ["simulate_nonzero_thread_device_requests"]
