"""The registry of benchmark cases.

A case is a JAX program family swept over one integer size parameter:

    @case("matmul", family="matmul", sizes=(256, 1024), quick=(64, 256),
          flops=lambda n: 2 * n**3, bytes=lambda n: 3 * 4 * n * n,
          label=lambda n: f"{n}x{n}x{n}", tol=1e-4)
    def _matmul(n, rng):
      return (lambda a, b: a @ b), (normal(rng, n, n), normal(rng, n, n))

The decorated function builds, for one size, the function to jit and its arguments (numpy
arrays or pytrees of them); the harness places the arguments on each backend.

`flops` and `bytes` are the roofline model of one call: arithmetic operations counted one
per multiply, add, compare or transcendental, and the compulsory memory traffic (every
input read once, every output written once), so `bytes / bandwidth` and `flops / peak` are
lower bounds no implementation can beat. `tol` bounds the agreement check between the two
backends: max |workshop - cpu| <= tol * max |cpu| over each output (`compare`, if given,
picks the part of the outputs checked).

A case that needs an optional library names its top-level modules in `requires`
(e.g. ("flax", "optax"), the `models` extra of setup.py): when one is not importable the
case is still registered and listed ("needs flax"), and the runner reports it as status
`skipped` without building it. A builder may also raise `Skip(reason)` when the library
imports but cannot do what the case needs (e.g. a model class missing from that version).
`x64=True` builds, compiles and runs the case under `jax.enable_x64(True)` (f64 operands).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib.util
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np


class Skip(Exception):
  """Raised by a case builder: the case cannot run in this environment (the message says
  why); the runner reports it as `skipped` on both backends, not as an error."""


Builder = Callable[[int, np.random.Generator], "tuple[Callable[..., Any], tuple[Any, ...]]"]


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  family: str
  sizes: tuple[int, ...]  # the full sweep
  quick_sizes: tuple[int, ...]  # --quick and the notebook
  build: Builder
  flops: Callable[[int], float]
  bytes: Callable[[int], float]
  label: Callable[[int], str]
  tol: float
  doc: str
  compile_samples: int = 1  # compile timings per backend (median taken)
  size_name: str = "n"  # what the size parameter counts, for plot axes
  # For multi-device cases: place(args, devices) -> the arguments placed (sharded) on
  # the backend's devices; None: everything on the first device.
  place: Callable[[Any, list], Any] | None = None
  devices: int = 1  # devices the case needs on each backend
  requires: tuple[str, ...] = ()  # importable modules the case needs (else: skipped)
  x64: bool = False  # run under jax.enable_x64(True)
  # outputs -> the pytree the agreement check compares; None: all of the outputs
  compare: Callable[[Any], Any] | None = None

  def missing(self) -> list[str]:
    """The modules of `requires` that cannot be imported here."""
    return [m for m in self.requires if importlib.util.find_spec(m) is None]

  def sweep(self, quick: bool) -> tuple[int, ...]:
    return self.quick_sizes if quick else self.sizes


_CASES: dict[str, Case] = {}


def case(
  name: str,
  *,
  family: str,
  sizes: Sequence[int],
  quick: Sequence[int],
  flops: Callable[[int], float],
  bytes: Callable[[int], float],
  label: Callable[[int], str] = str,
  tol: float = 1e-5,
  compile_samples: int = 1,
  size_name: str = "n",
  place: Callable[[Any, list], Any] | None = None,
  devices: int = 1,
  requires: Sequence[str] = (),
  x64: bool = False,
  compare: Callable[[Any], Any] | None = None,
) -> Callable[[Builder], Builder]:
  """Decorator registering a case builder under `name` (see the module docstring)."""

  def wrap(build: Builder) -> Builder:
    if name in _CASES:
      raise ValueError(f"benchmark case {name!r} registered twice")
    _CASES[name] = Case(
      name,
      family,
      tuple(sizes),
      tuple(quick),
      build,
      flops,
      bytes,
      label,
      tol,
      (build.__doc__ or "").strip(),
      compile_samples,
      size_name,
      place,
      devices,
      tuple(requires),
      x64,
      compare,
    )
    return build

  return wrap


def all_cases() -> list[Case]:
  from . import cases, model_cases  # noqa: F401  (registers the cases on first use)

  return list(_CASES.values())


def select(patterns: Iterable[str] | None = None) -> list[Case]:
  """The cases whose name or family matches any shell-style pattern, in registry order.

  Raises:
    ValueError: a pattern matches nothing (a typo should not silently run an empty suite).
  """
  cases = all_cases()
  if not patterns:
    return cases
  patterns = list(patterns)
  chosen = [
    c
    for c in cases
    if any(fnmatch.fnmatchcase(c.name, p) or fnmatch.fnmatchcase(c.family, p) for p in patterns)
  ]
  unmatched = [
    p
    for p in patterns
    if not any(fnmatch.fnmatchcase(c.name, p) or fnmatch.fnmatchcase(c.family, p) for c in cases)
  ]
  if unmatched:
    raise ValueError(
      f"no benchmark case matches {unmatched}; cases: {', '.join(c.name for c in cases)}"
    )
  return chosen


def normal(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
  """float32 samples of N(0, scale²)."""
  x = rng.standard_normal(shape, dtype=np.float32)
  return x * np.float32(scale) if scale != 1.0 else x
