"""What user programs reach on `workshop` beyond the op table: the JAX features the
plugin extends to its platform when it registers (jax_plugins.workshop.initialize).

- callbacks: host callbacks (jax.pure_callback, io_callback, jax.debug.callback/print);
  the C++ side (plugin_src/kernels/callback.cc) imports
  `jax_plugins.workshop.extensions.callbacks` by name.
- ffi: user FFI kernels (jax.ffi.register_ffi_target(..., platform="workshop")).
- linalg: the jax.lax.linalg primitives JAX lowers only for cpu/cuda/rocm.
- analysis: `jax.jit(f).lower(...).cost_analysis()`.
- multiprocess: several processes on one machine, as jax.distributed runs them.
"""
