"""Checks an installation of a plugin: ``python -m jax_plugins.workshop.teach.check [--platform NAME]``.

Runs what OpenXLA's PJRT plugin guide runs to verify a new plugin, plus the two ways an
install breaks without JAX noticing:

1. the library loads on its own (``ctypes.CDLL``, as the C++ conformance harness and
   notebook 01 load it): its dependencies resolve through the plugin's own RUNPATH, not
   through OpenBLAS that ``initialize()`` happened to preload;
2. JAX discovers the plugin and lists its devices;
3. the guide's programs give the guide's results on ``workshop``: ``jnp.add(1, 1)``,
   ``jax.jit(lambda x: x * 2)(1.)`` and a ``pmap`` with ``psum``.

``--platform NAME`` checks another plugin the same way: the module ``jax_plugins.NAME``
(a project ``python -m jax_plugins.workshop.new_device`` wrote, on ``PYTHONPATH``), whose
``library_path()`` names its library; its devices must be NAME's, numbered from 0.

Prints one line per check and exits with status 1 at the first failure.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import sys


def _check(name: str, got, expected) -> None:
  ok = got == expected
  print(f"{'ok  ' if ok else 'FAIL'} {name}: {got}" + ("" if ok else f" (expected {expected})"))
  if not ok:
    sys.exit(1)


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
  )
  parser.add_argument(
    "--platform", default="workshop", help="the plugin to check: the module jax_plugins.PLATFORM"
  )
  platform = parser.parse_args(argv).platform
  plugin_module = importlib.import_module(f"jax_plugins.{platform}")

  library = plugin_module.library_path()
  # A fresh process has not preloaded OpenBLAS yet, so this load resolves it exactly as
  # a plain dlopen of the file would.
  plugin = ctypes.CDLL(library)
  _check("the library loads and exports GetPjrtApi", hasattr(plugin, "GetPjrtApi"), True)

  # The guide's checks run with the plugin as the only platform.
  os.environ["JAX_PLATFORMS"] = platform
  import jax
  import jax.numpy as jnp

  devices = jax.devices()
  if platform == "workshop":
    _check(
      "jax.devices()",
      [repr(d) for d in devices],
      [f"WorkshopDevice(id={i})" for i in range(len(devices))],
    )
  else:
    print(f"     jax.devices(): {devices}")
    _check(
      "their platforms and ids",
      [(d.platform, d.id) for d in devices],
      [(platform, i) for i in range(len(devices))],
    )
  total = jnp.add(1, 1)
  _check("jnp.add(1, 1)", (str(total), total.devices().pop().platform), ("2", platform))
  _check("jax.jit(lambda x: x * 2)(1.)", str(jax.jit(lambda x: x * 2)(1.0)), "2.0")
  n = len(devices)
  _check(
    f"pmap(x + psum(x)) over {n} devices",
    str(jax.pmap(lambda x: x + jax.lax.psum(x, "i"), axis_name="i")(jnp.arange(n))),
    str([i + n * (n - 1) // 2 for i in range(n)]).replace(",", ""),
  )


if __name__ == "__main__":
  main()
