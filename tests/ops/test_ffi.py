"""User FFI kernels (jax.ffi.register_ffi_target + ffi_call) on workshop vs XLA:CPU.

tests/ffi/handlers.cc is compiled here against jax.ffi.include_dir(), as JAX's FFI
tutorial does, and every handler is registered for both platforms: the same handler code
then runs under XLA:CPU's FFI and under ours, so results must be identical.
"""

import ctypes
import hashlib
import os
import subprocess
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from reference import cpu_device

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def handlers():
  source = os.path.join(HERE, "ffi", "handlers.cc")
  with open(source, "rb") as f:
    digest = hashlib.sha256(f.read() + jax.ffi.include_dir().encode()).hexdigest()[:16]
  # Cached by content: compiling ffi.h takes tens of seconds on a loaded machine.
  lib_path = os.path.join(tempfile.gettempdir(), f"workshop_ffi_handlers_{digest}.so")
  if not os.path.exists(lib_path):
    tmp = lib_path + f".{os.getpid()}"
    subprocess.run(
      [
        "g++",
        "-std=c++17",
        "-O1",
        "-shared",
        "-fPIC",
        "-I",
        jax.ffi.include_dir(),
        source,
        "-o",
        tmp,
      ],
      check=True,
      timeout=300,
    )
    os.replace(tmp, lib_path)
  lib = ctypes.CDLL(lib_path)
  for name in ("RmsNormF32", "RmsNormF64", "AttrsProbe", "Scale", "DictProbe"):
    for platform in ("workshop", "cpu"):
      jax.ffi.register_ffi_target(
        f"test_{name}", jax.ffi.pycapsule(getattr(lib, name)), platform=platform
      )
  return lib


def both(f, *args):
  """jit(f)(*args) on workshop and on cpu (also when f takes no arguments: the default
  device picks the backend then)."""
  out = []
  for device in (jax.devices("workshop")[0], cpu_device()):
    with jax.default_device(device):
      out.append(jax.tree.map(np.asarray, jax.jit(f)(*jax.device_put(args, device))))
  return out


def rms_norm(x, eps=1e-5):
  name = {np.dtype(np.float32): "test_RmsNormF32", np.dtype(np.float64): "test_RmsNormF64"}
  return jax.ffi.ffi_call(
    name[np.dtype(x.dtype)], jax.ShapeDtypeStruct(x.shape, x.dtype), vmap_method="broadcast_all"
  )(x, eps=np.float32(eps))


@pytest.mark.parametrize("shape", [(7,), (3, 16), (2, 3, 5), (4, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rms_norm(handlers, shape, dtype):
  with jax.enable_x64(dtype == np.float64):
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    ours, ref = both(rms_norm, x)
    assert ours.dtype == ref.dtype == dtype
    np.testing.assert_array_equal(ours, ref)
    if x.size:
      expected = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, -1, keepdims=True) + 1e-5)
      np.testing.assert_allclose(ours, expected, rtol=1e-6)


def test_rms_norm_composes_with_jit_and_vmap(handlers):
  x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
  f = lambda v: jax.vmap(rms_norm)(jnp.tanh(v)) * 2
  ours, ref = both(f, x)
  np.testing.assert_allclose(ours, ref, rtol=1e-6)


def test_attribute_decoding(handlers):
  def f():
    return jax.ffi.ffi_call("test_AttrsProbe", jax.ShapeDtypeStruct((6,), np.float64))(
      k=np.int64(-42),
      flag=True,
      mode="hello",
      arr=np.array([1, 2, 3, 40], np.int64),
      scale=np.float64(2.5),
      small=np.uint8(200),
    )

  with jax.enable_x64(True):
    ours, ref = both(f)
  np.testing.assert_array_equal(ours, ref)
  np.testing.assert_array_equal(ours, [-42, 1, 5, 46, 2.5, 200])


def test_dictionary_attributes(handlers):
  """A dictionary attribute (ffi::Dictionary) reaches the handler as on XLA:CPU (it was a
  compile error). (JAX's ffi_call cannot express a dictionary inside one: it hashes
  attributes and has no encoding for a frozen one.)"""

  def f():
    return jax.ffi.ffi_call("test_DictProbe", jax.ShapeDtypeStruct((5,), np.float64))(
      cfg={"scale": np.float32(0.5), "k": np.int64(-7), "name": "x", "on": True}
    )

  with jax.enable_x64(True):
    ours, ref = both(f)
  np.testing.assert_array_equal(ours, ref)
  np.testing.assert_array_equal(ours, [4, -7, 0.5, -1, -1])


def test_any_buffer_handler(handlers):
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  f = lambda v: jax.ffi.ffi_call("test_Scale", jax.ShapeDtypeStruct(v.shape, v.dtype))(v)
  ours, ref = both(f, x)
  np.testing.assert_array_equal(ours, ref)
  np.testing.assert_array_equal(ours, 2 * x)


@pytest.mark.parametrize("side_effect", [False, True])
def test_handler_errors_keep_their_code_as_on_cpu(handlers, side_effect):
  """An error a handler returns is a JaxRuntimeError with the handler's code and message,
  raised by that call, as on XLA:CPU; later effects barriers don't raise it again (with
  has_side_effect the program holds a runtime token, which once kept the error)."""
  rms = lambda v: jax.ffi.ffi_call(
    "test_RmsNormF32", jax.ShapeDtypeStruct((), np.float32), has_side_effect=side_effect
  )(v, eps=np.float32(1e-5))
  scale = lambda v: jax.ffi.ffi_call(
    "test_Scale", jax.ShapeDtypeStruct(v.shape, v.dtype), has_side_effect=side_effect
  )(v)
  cases = [
    (rms, np.float32(3), "INVALID_ARGUMENT", "RmsNorm input must be an array"),
    (scale, np.arange(3, dtype=np.int32), "UNIMPLEMENTED", "Scale: unsupported dtype"),
  ]
  for device in (jax.devices("workshop")[0], cpu_device()):
    for f, arg, code, text in cases:
      with pytest.raises(jax.errors.JaxRuntimeError) as info:
        np.asarray(jax.jit(f)(jax.device_put(arg, device)))
      assert str(info.value).startswith(code + ":") and text in str(info.value)
      jax.effects_barrier()


def test_unregistered_target_is_a_compile_error():
  """Compiling a call to a target never registered for workshop fails (at compile, as on
  XLA:CPU, whose error says no handler is registered) and says how to register one."""
  f = lambda v: jax.ffi.ffi_call("test_never_registered", jax.ShapeDtypeStruct(v.shape, v.dtype))(v)
  for device in (jax.devices("workshop")[0], cpu_device()):
    lowered = jax.jit(f).lower(jax.device_put(np.ones(3, np.float32), device))
    with pytest.raises(Exception, match="test_never_registered") as info:
      lowered.compile()
  assert "No FFI handler registered" in str(info.value)  # XLA:CPU's
  with pytest.raises(Exception, match='register_ffi_target.*platform="workshop"') as info:
    jax.jit(f).lower(np.ones(3, np.float32)).compile()
  # The same form is one of XLA's own targets without a lowering rule: both are said.
  assert "no lowering rule" in str(info.value)
