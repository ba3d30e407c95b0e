"""Device layouts (jax.experimental.layout): what each program and buffer reports, and the
values, against JAX's CPU backend (XLA:CPU) running the same program in this process.

Each case runs on a 2x2 mesh of workshop devices and on one of CPU devices. Layouts are
compared as JAX reports them (`Format`s of compiled programs and arrays); a buffer's bytes
are read through `unsafe_buffer_pointer` to check that a column-major buffer really holds
its elements column-major on both backends.
"""

import ctypes

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.layout import Format, Layout
from jax.sharding import NamedSharding, PartitionSpec as P

ROW_MAJOR = Layout(major_to_minor=(0, 1))
COLUMN_MAJOR = Layout(major_to_minor=(1, 0))


def _mesh(platform):
  devices = jax.devices(platform)[:4]
  return jax.sharding.Mesh(np.array(devices).reshape(2, 2), ("x", "y"))


def _on_both(build):
  """build(mesh) on the workshop and CPU meshes -> (workshop result, CPU result)."""
  return build(_mesh("workshop")), build(_mesh("cpu"))


def _layouts(formats):
  return [
    f.layout.major_to_minor
    for f in jax.tree.leaves(formats, is_leaf=lambda f: isinstance(f, Format))
  ]


def _shard_bytes(array):
  """Each addressable shard's device memory, as bytes (in the shard's own layout)."""
  out = []
  array.block_until_ready()
  for shard in array.addressable_shards:
    data = shard.data
    size = data.size * data.dtype.itemsize
    out.append(ctypes.string_at(data.unsafe_buffer_pointer(), size))
  return out


def test_default_and_auto_layouts_match_cpu():
  """Default in/out layouts are row-major; Layout.AUTO makes a transposed result
  column-major (the transpose becomes a bitcast), as on XLA:CPU."""
  x = np.arange(4 * 4 * 2, dtype=np.float32).reshape(4, 4, 2)

  def build(mesh):
    s = NamedSharding(mesh, P("x", "y"))
    sds = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)
    f = lambda v: v.T
    default = jax.jit(f).lower(sds).compile()
    auto = (
      jax.jit(f, in_shardings=Format(Layout.AUTO), out_shardings=Format(Layout.AUTO))
      .lower(sds)
      .compile()
    )
    arr = jax.device_put(x, s)
    out = auto(arr)
    return (
      _layouts(default.input_formats),
      _layouts(default.output_formats),
      _layouts(auto.input_formats),
      _layouts(auto.output_formats),
      out.format.layout.major_to_minor,
      np.asarray(out),
    )

  ours, cpu = _on_both(build)
  assert ours[:5] == cpu[:5]
  assert cpu[3] == [(2, 1, 0)]  # column-major: the reference does choose a layout here
  np.testing.assert_array_equal(ours[5], x.T)
  np.testing.assert_array_equal(cpu[5], x.T)


def test_auto_layouts_flow_through_elementwise_ops_and_into_a_second_program():
  """AUTO results of (2 * x).T and x + 1; the first program's formats feed the second
  (test_auto_layout's pattern)."""
  x = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)

  def build(mesh):
    s = NamedSharding(mesh, P("x", "y"))
    sds = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)
    first = (
      jax.jit(
        lambda a: ((2 * a).T, a + 1),
        in_shardings=Format(Layout.AUTO),
        out_shardings=Format(Layout.AUTO),
      )
      .lower(sds)
      .compile()
    )
    outs = first(jax.device_put(x, s))
    second = jax.jit(lambda a, b: (a.T * 3, b - 1)).lower(*outs).compile()
    results = second(*outs)
    return (
      _layouts(first.output_formats),
      _layouts(second.input_formats),
      _layouts(second.output_formats),
      [np.asarray(o) for o in (*outs, *results)],
    )

  ours, cpu = _on_both(build)
  assert ours[:3] == cpu[:3]
  for a, b, want in zip(ours[3], cpu[3], [(2 * x).T, x + 1, 6 * x, x]):
    np.testing.assert_array_equal(a, want)
    np.testing.assert_array_equal(b, want)


def test_device_put_with_a_column_major_layout_stores_column_major():
  """jax.device_put(np, Format(column-major, s)): the array reports that layout and each
  shard's memory holds its elements column-major, byte for byte as on XLA:CPU."""
  x = np.arange(16 * 12, dtype=np.float32).reshape(16, 12)

  def build(mesh):
    s = NamedSharding(mesh, P("x"))
    out = jax.device_put(x, Format(COLUMN_MAJOR, s))
    return (
      out.format.layout.major_to_minor,
      [sh.data.format.layout.major_to_minor for sh in out.addressable_shards],
      _shard_bytes(out),
      np.asarray(out),
    )

  ours, cpu = _on_both(build)
  assert ours[0] == cpu[0] == (1, 0)
  assert ours[1] == cpu[1]
  assert ours[2] == cpu[2]
  # The reference's bytes are the shards transposed (column-major), not row-major.
  assert cpu[2][0] == np.ascontiguousarray(x[:8].T).tobytes()
  np.testing.assert_array_equal(ours[3], x)


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.int8, np.complex64])
def test_column_major_in_and_out_of_a_program(dtype):
  """in_shardings/out_shardings with concrete layouts: a column-major argument is read
  correctly and a result laid out column-major is stored so; donation still deletes."""
  x = (np.arange(8 * 16) % 23).astype(dtype).reshape(8, 16)

  def build(mesh):
    s = NamedSharding(mesh, P("x", "y"))
    col = Format(COLUMN_MAJOR, s)
    arr = jax.device_put(x, col)
    f = jax.jit(lambda a: a * 2 + 1, in_shardings=col, out_shardings=col)
    compiled = f.lower(arr).compile()
    out = f(arr)
    g = jax.jit(
      lambda a: a.T, in_shardings=col, out_shardings=Format(ROW_MAJOR, s), donate_argnums=0
    )
    arr2 = jax.device_put(x, col)
    out2 = g(arr2)
    return (
      _layouts(compiled.input_formats),
      _layouts(compiled.output_formats),
      out.format.layout.major_to_minor,
      _shard_bytes(out),
      np.asarray(out),
      out2.format.layout.major_to_minor,
      np.asarray(out2),
      arr2.is_deleted(),
    )

  ours, cpu = _on_both(build)
  assert ours[:4] == cpu[:4]
  np.testing.assert_array_equal(ours[4], x * 2 + 1)
  assert ours[5] == cpu[5]
  np.testing.assert_array_equal(ours[6], x.T)
  assert ours[7] and cpu[7]


def test_with_sharding_constraint_with_a_concrete_layout():
  """with_sharding_constraint(y, Format(layout, s)) lowers to custom_call
  @LayoutConstraint; both orders of a transposed value, as test_wsc_concrete_layout."""
  x = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)

  def build(mesh):
    s = NamedSharding(mesh, P("x"))
    arr = jax.device_put(x, s)
    outs = []
    for layout in (ROW_MAJOR, COLUMN_MAJOR):
      f = jax.jit(
        lambda a, layout=layout: jax.lax.with_sharding_constraint(a.T * 2, Format(layout, s))
      )
      assert "LayoutConstraint" in f.lower(arr).as_text()
      out = f(arr)
      outs.append((out.format.layout.major_to_minor, out.sharding.spec, np.asarray(out)))
    return outs

  ours, cpu = _on_both(build)
  for (ours_layout, ours_spec, ours_value), (cpu_layout, cpu_spec, _) in zip(ours, cpu):
    assert ours_layout == cpu_layout
    assert ours_spec == cpu_spec
    np.testing.assert_array_equal(ours_value, x.T * 2)


def test_a_column_major_argument_recompiles_for_its_layout():
  """jit(f) called with a column-major array compiles a second program for that layout
  (test_cpp_layout_cache_miss) and computes the same values."""
  x = np.arange(16 * 16, dtype=np.float32).reshape(16, 16) / 7

  def build(mesh):
    s = NamedSharding(mesh, P("x", "y"))
    f = jax.jit(lambda a: a @ a.T)
    row = f(jax.device_put(x, s))
    col_arr = jax.device_put(x, Format(COLUMN_MAJOR, s))
    col = f(col_arr)
    return (_layouts(f.lower(col_arr).compile().input_formats), np.asarray(row), np.asarray(col))

  ours, cpu = _on_both(build)
  assert ours[0] == cpu[0] == [(1, 0)]
  want = x.astype(np.float64) @ x.T.astype(np.float64)
  np.testing.assert_allclose(ours[1], want, rtol=1e-6)
  np.testing.assert_allclose(ours[2], want, rtol=1e-6)


def test_three_dimensional_layout_on_one_device():
  """A rank-3 permuted layout in and out of a single-device program."""
  x = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
  layout = Layout(major_to_minor=(1, 2, 0))

  def build(mesh):
    device = mesh.devices.flat[0]
    s = jax.sharding.SingleDeviceSharding(device)
    arr = jax.device_put(x, Format(layout, s))
    out = jax.jit(lambda a: jnp.sin(a), out_shardings=Format(layout, s))(arr)
    return (
      arr.format.layout.major_to_minor,
      out.format.layout.major_to_minor,
      _shard_bytes(arr),
      _shard_bytes(out),
      np.asarray(out),
    )

  ours, cpu = _on_both(build)
  assert ours[:3] == cpu[:3]
  np.testing.assert_allclose(
    np.frombuffer(ours[3][0], np.float32), np.frombuffer(cpu[3][0], np.float32), rtol=2e-7
  )
  np.testing.assert_allclose(ours[4], np.sin(x.astype(np.float64)), rtol=2e-7)


def test_layouts_survive_executable_serialization():
  """A serialized executable keeps its parameter and output layouts (and converts)."""
  from jax.experimental.serialize_executable import deserialize_and_load, serialize

  x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
  device = jax.devices("workshop")[0]
  col = Format(COLUMN_MAJOR, jax.sharding.SingleDeviceSharding(device))
  arr = jax.device_put(x, col)
  compiled = (
    jax.jit(lambda a: (a + 1).T, in_shardings=col, out_shardings=Format(COLUMN_MAJOR, col.sharding))
    .lower(arr)
    .compile()
  )
  payload, in_tree, out_tree = serialize(compiled)
  loaded = deserialize_and_load(payload, in_tree, out_tree, execution_devices=[device])
  assert _layouts(loaded.input_formats) == _layouts(compiled.input_formats) == [(1, 0)]
  assert _layouts(loaded.output_formats) == _layouts(compiled.output_formats) == [(1, 0)]
  out = loaded(arr)
  assert out.format.layout.major_to_minor == (1, 0)
  np.testing.assert_array_equal(np.asarray(out), (x + 1).T)
  # Column-major (6, 8) is (x + 1) itself in row-major order.
  assert _shard_bytes(out)[0] == (x + 1).tobytes()


def test_buffer_from_host_buffer_with_a_device_layout_through_the_c_api():
  """PJRT_Client_BufferFromHostBuffer with a column-major device_layout (what jaxlib never
  sends, but the C API allows): the device bytes are column-major, the Layouts extension
  would report it (tests/capi_harness: DeviceLayoutColumnMajor) and ToHostBuffer without a
  host layout gives back row-major. (XLA's CPU plugin reports {0,1} but keeps the host's
  row-major bytes, so there is no reference to compare the bytes with but numpy.)"""
  import sys
  from pathlib import Path

  sys.path.insert(0, str(Path(__file__).parent.parent / "hostile"))
  from pjrt import Api, int64s  # pylint: disable=g-import-not-at-top

  api = Api()
  client = api.client()
  x = np.arange(2 * 3, dtype=np.float32).reshape(2, 3) + 1
  order, order_p = int64s([0, 1])
  layout = (ctypes.c_uint64 * 10)()  # PJRT_Buffer_MemoryLayout, tiled (type 0)
  layout[0], layout[2], layout[4], layout[5], layout[9] = 80, 56, order_p, 2, 0
  dims, dims_p = int64s([2, 3])
  put = api.ok(
    "PJRT_Client_BufferFromHostBuffer",
    api.args(
      "PJRT_Client_BufferFromHostBuffer",
      client=client,
      data=x.ctypes.data,
      type=11,
      dims=dims_p,
      num_dims=2,
      device=api.devices(client)[0],
      device_layout=ctypes.addressof(layout),
    ),
  )
  pointer = api.ok(
    "PJRT_Buffer_UnsafePointer", api.args("PJRT_Buffer_UnsafePointer", buffer=put.buffer)
  ).buffer_pointer
  assert ctypes.string_at(pointer, x.nbytes) == np.ascontiguousarray(x.T).tobytes()
  back = np.zeros_like(x)
  read = api.ok(
    "PJRT_Buffer_ToHostBuffer",
    api.args("PJRT_Buffer_ToHostBuffer", src=put.buffer, dst=back.ctypes.data, dst_size=x.nbytes),
  )
  api.ok("PJRT_Event_Await", api.args("PJRT_Event_Await", event=read.event))
  np.testing.assert_array_equal(back, x)
  for name, handle in (
    ("PJRT_Event_Destroy", read.event),
    ("PJRT_Event_Destroy", put.done_with_host_buffer),
  ):
    api.ok(name, api.args(name, event=handle))
  api.ok("PJRT_Buffer_Destroy", api.args("PJRT_Buffer_Destroy", buffer=put.buffer))
  api.ok("PJRT_Client_Destroy", api.args("PJRT_Client_Destroy", client=client))


def test_tiled_layouts_are_refused_at_compile_time():
  """A tiled layout (TPU's T(8,128)) is refused when the program is compiled, naming the
  layout. XLA:CPU accepts it, reports it back and stores the elements untiled (row-major
  here, checked below), so the tiles would be a label without effect; this plugin does
  not report a layout its memory does not have."""
  x = np.arange(16 * 256, dtype=np.float32).reshape(16, 256)
  tiled = Layout(major_to_minor=(0, 1), tiling=((8, 128),))
  cpu = jax.devices("cpu")[0]
  out = jax.jit(
    lambda a: a * 2, out_shardings=Format(tiled, jax.sharding.SingleDeviceSharding(cpu))
  )(jax.device_put(x, cpu))
  assert out.format.layout == tiled
  assert _shard_bytes(out)[0] == (x * 2).tobytes()  # untiled
  device = jax.devices("workshop")[0]
  f = jax.jit(
    lambda a: a * 2, out_shardings=Format(tiled, jax.sharding.SingleDeviceSharding(device))
  )
  with pytest.raises(
    jax.errors.JaxRuntimeError,
    match=r"UNIMPLEMENTED: .*result 0 of @main asks for the layout "
    r"\{1,0:T\(8,128\)\}; only dense layouts",
  ):
    f(jax.device_put(x, device))


def test_a_column_major_array_copied_to_another_device_keeps_its_layout():
  """jax.device_put(column-major array, other device) (PJRT_Buffer_CopyToMemory) keeps the
  layout, as XLA:CPU reports too, and a program reading the copy sees the same values.
  Checked against numpy only: XLA:CPU's copy keeps the label but writes the elements
  row-major (measured through unsafe_buffer_pointer), so its program reading the copy
  returns wrong values ([28, 92, 156] for the first sums here)."""
  x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
  d0, d1 = jax.devices("workshop")[:2]
  a = jax.device_put(x, Format(COLUMN_MAJOR, jax.sharding.SingleDeviceSharding(d0)))
  b = jax.device_put(a, d1)
  assert b.format.layout.major_to_minor == (1, 0)
  assert _shard_bytes(b) == _shard_bytes(a) == [np.ascontiguousarray(x.T).tobytes()]
  np.testing.assert_array_equal(np.asarray(b), x)
  np.testing.assert_array_equal(np.asarray(jnp.sum(b, axis=0)), x.sum(axis=0))
  cpu0, cpu1 = jax.devices("cpu")[:2]
  on_cpu = jax.device_put(
    jax.device_put(x, Format(COLUMN_MAJOR, jax.sharding.SingleDeviceSharding(cpu0))), cpu1
  )
  assert on_cpu.format.layout.major_to_minor == (1, 0)


@pytest.mark.parametrize(
  "mode,ours",
  [
    ("{0,0}", "parameter 0 of @main asks for the layout {0,0}, which is not a permutation"),
    ("{0}", "parameter 0 of @main asks for the layout {0}, which is not a permutation"),
    ("bogus", "parameter 0 of @main has the layout mode 'bogus'"),
    ("{0,1}", None),
  ],
)
def test_layout_modes_of_a_hand_written_program(mode, ours):
  """mhlo.layout_mode as any producer may write it: a bad one is INVALID_ARGUMENT at
  compile time on both backends (each with its own message); a good one is reported."""
  from jax._src import xla_bridge
  from jax._src.lib import xla_client as xc

  text = f"""module @m {{ func.func public @main(%a: tensor<2x3xf32> {{mhlo.layout_mode = "{mode}"}})
      -> tensor<3x2xf32> {{
    %t = stablehlo.transpose %a, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
    return %t : tensor<3x2xf32> }} }}"""
  results = []
  for platform in ("workshop", "cpu"):
    backend = xla_bridge.get_backend(platform)
    devices = xc.DeviceList(tuple(backend.local_devices()[:1]))
    try:
      exe = backend.compile_and_load(text, devices, xc.CompileOptions())
      results.append(("ok", [str(l) for l in exe.get_parameter_layouts()]))
    except jax.errors.JaxRuntimeError as e:
      results.append(("error", str(e)))
  if ours is None:
    assert results[0] == results[1] == ("ok", [mode])
  else:
    assert [r[0] for r in results] == ["error", "error"]
    assert results[0][1].startswith("INVALID_ARGUMENT") and ours in results[0][1]
    assert results[1][1].startswith("INVALID_ARGUMENT")
