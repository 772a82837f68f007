"""Which JAX the adapter fits, and access to JAX's private interpret-mode modules."""

from __future__ import annotations

from ..errors import UnsupportedJaxError

SUPPORTED = "JAX/jaxlib 0.11.x and 0.12.x on Python >= 3.12"
_SUPPORTED_MINORS = ((0, 11), (0, 12))

# The `GPUSharedMemory` methods the hooks wrap (their presence is part of the fit check).
_HOOKED_METHODS = (
    "__init__", "allocate_buffer", "deallocate_buffer", "allocate_barrier",
    "deallocate_barrier", "allocate_cluster_barrier", "deallocate_cluster_barrier",
    "set_failed",
)


def check_version(version: str) -> None:
    """Raise `UnsupportedJaxError` unless `version` (e.g. "0.12.0.1") is a supported JAX."""
    parts = tuple(int(p) for p in str(version).split(".")[:2] if p.isdigit())
    if parts not in _SUPPORTED_MINORS:
        raise UnsupportedJaxError(
            f"pallas_viz supports {SUPPORTED}; this is JAX {version}. "
            "Install a supported version, e.g. pip install 'jax[cpu]==0.12.*'."
        )


_FITTED: list = []  # (jax, its version, the modules) once they were found to fit


def _import_internals():
    """Import the private modules, or raise `UnsupportedJaxError`. (Once they fit, the
    modules are kept: only the version is read again.)"""
    if _FITTED:
        jax, version, modules = _FITTED[0]
        if getattr(jax, "__version__", "unknown") == version:
            return modules
    try:
        import jax
    except ImportError as e:  # pragma: no cover - jax is a dependency
        raise UnsupportedJaxError(f"JAX is not installed; pallas_viz supports {SUPPORTED}.") from e
    version = getattr(jax, "__version__", "unknown")
    check_version(version)
    try:
        from jax._src import source_info_util
        from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks
        from jax._src.pallas.mosaic_gpu.interpret import shared_memory as gsm
    except ImportError as e:
        raise UnsupportedJaxError(
            f"JAX {version} has no Mosaic GPU interpret mode that pallas_viz can hook "
            f"({e}); pallas_viz supports {SUPPORTED}."
        ) from e
    missing = [m for m in _HOOKED_METHODS if not hasattr(gsm.GPUSharedMemory, m)]
    missing += [n for n in ("reset_gpu_interpret_mode_state", "call_make_allocation_request_array")
                if not hasattr(gpu_callbacks, n)]
    if missing:
        raise UnsupportedJaxError(
            f"JAX {version}'s GPU interpret mode lacks {', '.join(missing)}; "
            f"pallas_viz supports {SUPPORTED}."
        )
    modules = (jax, source_info_util, gpu_callbacks, gsm)
    _FITTED[:] = [(jax, version, modules)]
    return modules


def check_supported() -> str:
    """Return the JAX version if the adapter fits it, else raise `UnsupportedJaxError`."""
    jax, *_ = _import_internals()
    return jax.__version__


def reset_interpreter_state() -> None:
    """Reset JAX's global GPU interpret-mode state so the next kernel can run."""
    _, _, gpu_callbacks, _ = _import_internals()
    gpu_callbacks.reset_gpu_interpret_mode_state()
