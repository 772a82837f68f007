"""The JAX adapter: the only package of pallas_viz that touches ``jax._src``.

Everything pallas_viz needs from JAX's private GPU interpret mode goes through
here: the version check (`check_supported`, naming the supported versions when
the installed JAX does not fit), installing and removing the runtime hooks
(`hooked`), resetting interpreter state, resolving source lines and reading the
interpreter's failures, deadlocks (`monitor`) and races (`races`), and scoping the
interpreter's per-cluster reset to one device (`device_reset`).
Supported: JAX/jaxlib 0.11.x and 0.12.x on Python >= 3.12.
"""

from __future__ import annotations

from .device_reset import earlier_kernel_failure
from .hooks import hooked, hooks_installed, quiet_callback_log
from .rejections import raised_by_pallas
from .simulate import simulated_device_request_bug
from .sources import (
    caller_location,
    raised_in_pallas,
    silent_failure_text,
    source_location,
    traceback_user_location,
)
from .version import SUPPORTED, check_supported, check_version, reset_interpreter_state

# JAX's own shared-memory log (`logging_mode=LoggingMode.SHARED_MEMORY`), read by the
# tests and benchmarks as an independent count.
SHARED_MEMORY_LOGGER = "jax._src.pallas.mosaic.interpret.shared_memory"

__all__ = [
    "SHARED_MEMORY_LOGGER", "SUPPORTED", "caller_location", "check_supported", "check_version",
    "earlier_kernel_failure",
    "hooked", "hooks_installed", "quiet_callback_log", "raised_by_pallas", "raised_in_pallas",
    "reset_interpreter_state", "silent_failure_text", "simulated_device_request_bug",
    "source_location",
    "traceback_user_location",
]
