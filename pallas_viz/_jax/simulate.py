"""A simulated interpreter bug, for teaching and for testing (see `pallas_viz.simulate`)."""

from __future__ import annotations

import contextlib

from .version import _import_internals


@contextlib.contextmanager
def simulated_device_request_bug():
    """SIMULATION of an interpreter bug: device-level requests get a non-zero thread id.

    While active, every allocation request made for a whole device (kernel operands
    and pallas_call scratch) with a ref count above one carries
    ``thread_id = ref count`` (the number of threads), as an interpreter that maps
    threads wrongly would. The interpreter then raises ``ValueError: `thread_id` must
    be zero when allocating a buffer for all threads``. JAX's caches are cleared on
    entry and exit so that kernels are re-traced with and without the change.
    """
    jax, _, cb, gsm = _import_internals()
    orig = cb._make_allocation_request_array

    def make_request(*, token, compute_unit, memory_space_id, initial_ref_count=1):
        token, arr = orig(token=token, compute_unit=compute_unit,
                          memory_space_id=memory_space_id, initial_ref_count=initial_ref_count)
        if isinstance(compute_unit, gsm.Device) and int(initial_ref_count) > 1:
            req = gsm.HostAllocationRequest.from_array(arr)
            arr = gsm.HostAllocationRequest(
                memory_space_id=req.memory_space_id, device_id=req.device_id,
                block_id=req.block_id, thread_id=int(initial_ref_count),
                initial_ref_count=req.initial_ref_count).as_np_array
        return token, arr

    cb._make_allocation_request_array = make_request
    jax.clear_caches()
    try:
        yield
    finally:
        cb._make_allocation_request_array = orig
        jax.clear_caches()
