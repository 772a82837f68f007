"""Parts of the JAX adapter (see `pallas_viz._jax_adapter`).

Like `_jax_adapter`, these modules touch JAX's private interpret-mode internals;
nothing else in pallas_viz may. `_jax_adapter` installs and removes them.
"""
