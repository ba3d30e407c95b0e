"""The notebooks' helpers: what the workshop's lessons and checks run, not what user
programs need.

- notebook: what every notebook needs first (setup, builds, the exercises).
- tracing: a trace of every PJRT C API call JAX makes (`jax_plugins.workshop.trace()`).
- conformance: the PJRT C API conformance harness (tests/capi_harness), run on a plugin.
- coverage: the op x dtype coverage report (`python -m jax_plugins.workshop.teach.coverage`).
- check: checks an installed plugin
  (`python -m jax_plugins.workshop.teach.check [--platform NAME]`).
"""
