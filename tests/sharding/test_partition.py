"""Sharded programs that once aborted the process or failed to partition, each against
JAX's CPU backend with the same program.

The unreduced/reduced ones run in a subprocess: on jaxlib 0.10.2 Shardy's
convert-global-to-local CHECK-aborts the host process on what they build (a sharded
contracting dot whose partial result is kept `unreduced`), so a regression must fail
the test, not kill the test run.
"""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def _run_script(body: str, devices: int = 4) -> str:
  """Runs `body` in a fresh interpreter with `devices` devices per backend; its stdout.
  Both backends run the program (the script compares them and prints the verdicts)."""
  env = dict(
    os.environ,
    JAX_PLATFORMS="workshop,cpu",
    XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
    JAX_PJRT_CLIENT_CREATE_OPTIONS=f"num_devices:{devices}",
  )
  proc = subprocess.run(
    [sys.executable, "-c", _PRELUDE + textwrap.dedent(body)],
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, (
    f"exit {proc.returncode} (negative: killed by a signal, e.g. an abort)\n"
    f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
  )
  return proc.stdout


_PRELUDE = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P, reshard
def mesh_on(platform, shape, names):
  return jax.make_mesh(shape, names, axis_types=(AxisType.Explicit,) * len(shape),
                       devices=jax.devices(platform)[:int(np.prod(shape))])
"""


def test_einsum_kept_unreduced_does_not_abort_and_matches_cpu():
  # pjit_test.py::ShardingInTypesTest::test_einsum_unreduced_with_transpose: the dot
  # contracts "y" and keeps the partial sums (unreduced={"y"}); the reshard to reduced
  # sums them once (it summed twice: two all-reduces over "y").
  out = _run_script("""
  results = {}
  for platform in ("workshop", "cpu"):
    mesh = mesh_on(platform, (2, 2), ("x", "y"))
    with jax.set_mesh(mesh):
      a = jax.device_put(jnp.arange(192).reshape(6, 4, 8), P(None, "x", "y"))
      b = jax.device_put(jnp.arange(320).reshape(4, 8, 10), P("x", "y", None))
      f = jax.jit(lambda a, b: jnp.einsum(
          "heb,eba->hea", a, b, out_sharding=P(None, "x", None, unreduced={"y"})))
      out = f(a, b)
      reduced = reshard(out, P(None, "x", None))
      results[platform] = (out.sharding.spec, np.asarray(reduced),
                           [np.asarray(s.data) for s in out.addressable_shards])
  ours, ref = results["workshop"], results["cpu"]
  print("SPEC", ours[0] == ref[0] == P(None, "x", None, unreduced={"y"}))
  print("VALUE", np.array_equal(ours[1], ref[1]))
  print("EXPECTED", np.array_equal(ours[1], np.einsum(
      "heb,eba->hea", np.arange(192).reshape(6, 4, 8), np.arange(320).reshape(4, 8, 10))))
  # The partial sums themselves: each device's shard, as XLA:CPU leaves them.
  print("SHARDS", all(np.array_equal(x, y) for x, y in zip(ours[2], ref[2])))
  """)
  assert "SPEC True" in out and "VALUE True" in out and "EXPECTED True" in out, out
  assert "SHARDS True" in out, out


def test_grad_of_reduced_weights_does_not_abort_and_matches_cpu():
  # pjit_test.py::ShardingInTypesTest::test_concat_reduced_split_unreduced: the grad of
  # a `reduced` weight is an unreduced dot result, then sliced.
  out = _run_script("""
  results = {}
  for platform in ("workshop", "cpu"):
    mesh = mesh_on(platform, (2,), ("x",))
    with jax.set_mesh(mesh):
      x = jax.device_put(np.arange(8.).reshape(2, 4), P("x"))
      w1 = jax.device_put(np.arange(32.).reshape(4, 8), P(reduced={"x"}))
      w2 = jax.device_put(np.arange(32.).reshape(4, 8) / 2, P(reduced={"x"}))
      def fn(x, w1, w2):
        return (x @ jnp.concatenate([w1, w2], axis=-1)).sum()
      g = jax.jit(jax.grad(fn, argnums=(0, 1, 2)))(x, w1, w2)
      results[platform] = ([o.sharding.spec for o in g],
                           [np.asarray(g[0])] + [np.asarray(reshard(o, P())) for o in g[1:]])
  ours, ref = results["workshop"], results["cpu"]
  print("SPECS", ours[0] == ref[0] == [P("x", None), P(None, None, unreduced={"x"}),
                                       P(None, None, unreduced={"x"})])
  print("VALUES", all(np.array_equal(a, b) for a, b in zip(ours[1], ref[1])))
  """)
  assert "SPECS True" in out and "VALUES True" in out, out


def _mesh(platform, n=2):
  return jax.make_mesh((n,), ("x",), axis_types=(AxisType.Auto,), devices=jax.devices(platform)[:n])


def _on_both(f, v, rtol=2e-6):
  outs = {}
  for platform in ("workshop", "cpu"):
    x = jax.device_put(v, NamedSharding(_mesh(platform), P("x")))
    outs[platform] = jax.jit(f)(x)
  a, b = outs["workshop"], outs["cpu"]
  assert a.sharding.shard_shape(a.shape) == b.sharding.shard_shape(b.shape)
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("n", [16, 10, 6])
def test_general_body_cumulative_reduce_window_on_a_sharded_operand(n):
  # The reduce_window of cumlogsumexp (a body that is not add/max/min) was lowered on the
  # local shard as if it were the whole value (its scan's slices then failed the plan's
  # checks) instead of being partitioned; the partitioner runs it whole.
  v = np.linspace(-2, 3, n).astype(np.float32)
  _on_both(jax.lax.cumlogsumexp, v)
  _on_both(lambda v: jax.lax.cumlogsumexp(v, reverse=True), v)


@pytest.mark.parametrize("n", [16, 12, 10, 6])
def test_associative_scan_on_a_sharded_operand(n):
  # Shardy's propagation sharded every level of the scan like its operand, down to 7-, 3-,
  # 1- and 0-element slices (uneven: refused, and zero-size: an invalid all-gather);
  # those intermediates lose the axes that do not divide them.
  _on_both(lambda v: jax.lax.associative_scan(jnp.add, v), np.arange(n, dtype=np.float32))
  _on_both(
    lambda v: jax.lax.associative_scan(jnp.maximum, v, reverse=True),
    np.sin(np.arange(n, dtype=np.float32)),
  )


def test_replicated_to_unreduced_keeps_the_value_on_one_device_per_group():
  # reshard(P() -> unreduced): sdy.replicated_to_unreduced, which convert-global-to-local
  # cannot lower; the devices at coordinate 0 of the unreduced axes keep the value, the
  # others hold zeros (XLA:CPU's shards), and the reshard back sums them.
  out = _run_script("""
  results = {}
  specs = [P(unreduced={"x"}), P("x", unreduced={"y"}), P("y", unreduced={"x"}),
           P(None, None, unreduced={"x", "y"})]
  for platform in ("workshop", "cpu"):
    with jax.set_mesh(mesh_on(platform, (2, 2), ("x", "y"))):
      inp = jax.device_put(jnp.arange(16.).reshape(8, 2), P())
      results[platform] = []
      for spec in specs:
        arr = reshard(inp, spec)
        back = reshard(arr, P(*spec.partitions))
        results[platform].append(([np.asarray(s.data) for s in arr.addressable_shards],
                                  np.asarray(back)))
  ok = all(all(np.array_equal(a, b) for a, b in zip(o[0], r[0])) and
           np.array_equal(o[1], r[1]) and np.array_equal(o[1], np.arange(16.).reshape(8, 2))
           for o, r in zip(results["workshop"], results["cpu"]))
  print("SHARDS", ok)
  """)
  assert "SHARDS True" in out, out


def _exported_vjp_on(platform, in_sharded, out_sharded, with_mesh_context):
  """jax.export of a jit over 2 devices, serialized with its VJPs, and its first- and
  second-order VJP called on `platform` over a mesh with another axis name (export_test's
  test_grad_with_sharding)."""
  import contextlib

  from jax import export
  from jax.sharding import Mesh

  x = np.arange(200, dtype=np.float32).reshape(10, 20)
  mesh = Mesh(jax.devices(platform)[:2], "d")
  spec_in, spec_out = P(None, "d"), P("d", None)
  kwargs = {}
  if in_sharded is not None:
    kwargs["in_shardings"] = (
      (spec_in if with_mesh_context else NamedSharding(mesh, spec_in)) if in_sharded else None
    )
  if out_sharded is not None:
    kwargs["out_shardings"] = (
      (spec_out if with_mesh_context else NamedSharding(mesh, spec_out)) if out_sharded else None
    )
  # pjit, not jit: a PartitionSpec resolves against the legacy `with mesh:` context.
  from jax.experimental.pjit import pjit

  f = pjit(lambda x: jnp.sin(x.T), **kwargs)
  with mesh if with_mesh_context else contextlib.nullcontext():
    exported = export.export(f, platforms=[platform])(x)
    exported = export.deserialize(exported.serialize(vjp_order=2))
    vjp = exported.vjp()
    vjp2 = vjp.vjp()
  call_mesh = Mesh(jax.devices(platform)[: vjp.nr_devices], "e")
  replicated = NamedSharding(call_mesh, P())
  g1 = jax.jit(vjp.call, in_shardings=(replicated,) * 2)(x, x.T)
  g2 = jax.jit(vjp2.call, in_shardings=(replicated,) * 3)(x, x.T, x)
  return [np.asarray(a) for a in jax.tree.leaves((g1, g2))], [
    a.sharding.shard_shape(a.shape) for a in jax.tree.leaves((g1, g2))
  ]


@pytest.mark.parametrize("with_mesh_context", [True, False])
@pytest.mark.parametrize(
  "in_sharded,out_sharded", [(None, None), (False, True), (True, None), (True, True)]
)
def test_exported_vjp_of_a_sharded_jit_runs_on_a_renamed_mesh(
  in_sharded, out_sharded, with_mesh_context
):
  # The call of an exported function brings its own mesh (@mesh, "d") next to the
  # caller's (@mesh_0, "e"): the reshards between them were left to
  # convert-global-to-local, which failed on them; and the optimized program of an
  # unpartitioned call kept the callee's shardings after dropping its mesh (invalid, so
  # no output shardings reached JAX: the results' sharding was UnspecifiedValue).
  (ours, our_shards), (theirs, their_shards) = (
    _exported_vjp_on(p, in_sharded, out_sharded, with_mesh_context) for p in ("workshop", "cpu")
  )
  x = np.arange(200, dtype=np.float64).reshape(10, 20)
  np.testing.assert_allclose(ours[0], (np.cos(x.T) * x.T).T, rtol=1e-5)  # f64 reference
  for a, b in zip(ours, theirs, strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
  assert our_shards == their_shards


def test_grad_of_exported_functions_over_meshes_of_reversed_devices():
  # export_test's test_grad_sharding_different_mesh: the same mesh with its devices in
  # reverse order is another device assignment, not a renamed mesh.
  from jax import export
  from jax.sharding import Mesh

  devices = jax.devices("workshop")[:4]
  forward = NamedSharding(Mesh(devices, "i"), P("i"))
  backward = NamedSharding(Mesh(devices[::-1], "i"), P("i"))
  f = lambda x: jnp.sum(x * 2.0)
  x = jnp.ones((4,), device=forward)
  exp = export.export(jax.jit(f, in_shardings=forward))(x)
  exp_rev = export.export(jax.jit(f, in_shardings=backward))(np.ones(4, np.float32))
  np.testing.assert_array_equal(np.asarray(jax.grad(exp.call)(x)), np.full(4, 2.0))
  np.testing.assert_array_equal(
    np.asarray(jax.grad(exp_rev.call)(jax.device_put(np.ones(4, np.float32), backward))),
    np.full(4, 2.0),
  )


def test_slices_and_pads_of_sharded_loop_carries_do_not_crash_and_match_cpu():
  # pjit_test.py::ShardingInTypesTest::test_scan_with_random_key_inside_jit: a scan over a
  # batch of keys sharded on "x" slices its sharded carry; convert-global-to-local found
  # no sharding for the loop's block argument and dereferenced it (SIGSEGV), or, for a
  # pad, CHECK-failed. Each carry reaches such ops through a relay that has one.
  out = _run_script("""
  from jax.sharding import Mesh
  bodies = {
      "slice": lambda c: jnp.concatenate([c[:, 1:] + 1, c[:, :1]], axis=1),
      "pad": lambda c: jnp.pad(c, ((0, 0), (1, 0)))[:, :2] + c,
      "dynamic_update_slice": lambda c: jax.lax.dynamic_update_slice(
          c, c[:, :1] * 2, (0, 1)),
  }
  def scan_keys(xs):
    def step(carry, x):
      nxt = jax.vmap(jax.random.fold_in)(carry, x)
      return jnp.where(x % 2 == 0, carry, nxt), None
    rng = jnp.broadcast_to(jax.random.key(0), xs.shape[1:])
    return jax.random.key_data(jax.lax.scan(step, rng, xs)[0])
  results = {}
  for platform in ("workshop", "cpu"):
    mesh = Mesh(np.array(jax.devices(platform)[:2]), ("x",))
    x = jax.device_put(jnp.arange(8.).reshape(4, 2), NamedSharding(mesh, P("x", None)))
    outs = [jax.jit(lambda x, b=b: jax.lax.fori_loop(0, 3, lambda i, c: b(c), x))(x)
            for b in bodies.values()]
    xs = jax.device_put(jnp.arange(8).reshape(2, 4), NamedSharding(mesh, P(None, "x")))
    outs.append(jax.jit(scan_keys)(xs))
    results[platform] = [(np.asarray(o), o.sharding.shard_shape(o.shape)) for o in outs]
  for name, o, r in zip([*bodies, "scan_keys"], results["workshop"], results["cpu"]):
    print(name, np.array_equal(o[0], r[0]) and o[1] == r[1])
  """)
  for name in ("slice", "pad", "dynamic_update_slice", "scan_keys"):
    assert f"{name} True" in out, out


def test_gradient_through_an_exported_shard_map():
  # The exported shard_map sits in a private function of the calling program, which is
  # not partitioned (its body is per-device code already); the optimized program
  # inlined its manual computation with the global argument type, failed to verify,
  # and JAX got no output shardings (the result's sharding was UnspecifiedValue).
  from jax import export
  from jax.sharding import Mesh

  def run(platform):
    mesh = Mesh(jax.devices(platform)[:4], ("x",))
    f = jax.jit(
      jax.shard_map(
        lambda x: jax.lax.psum(jnp.sin(x), "x"), mesh=mesh, in_specs=P("x"), out_specs=P()
      )
    )
    x = jax.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P("x")))
    exported = export.deserialize(export.export(f, platforms=[platform])(x).serialize(vjp_order=1))
    y = exported.call(x)
    grad = jax.grad(lambda x: jnp.sum(exported.call(x)))(x)
    return np.asarray(y), np.asarray(grad), y.sharding.spec

  (y, grad, spec), (y_cpu, grad_cpu, spec_cpu) = run("workshop"), run("cpu")
  v = np.arange(8, dtype=np.float64)
  np.testing.assert_allclose(y, np.sin(v).reshape(4, 2).sum(0), rtol=1e-6)
  np.testing.assert_allclose(grad, np.cos(v), rtol=1e-6)
  np.testing.assert_allclose(y, y_cpu, rtol=1e-6)
  np.testing.assert_allclose(grad, grad_cpu, rtol=1e-6)
  assert spec == spec_cpu


def test_unreduced_grads_of_a_scan_over_reduced_weights_match_cpu():
  # pjit_test.py::ShardingInTypesTest::test_microbatch_vmap_unreduced: in the scan's
  # backward loop a dot contracting "fsdp" of a loop carry keeps its partial sums
  # (unreduced); the carry's sharding was not seen (a loop region's argument), so the
  # dot did not get the all-reduce convert-global-to-local CHECKs for (an abort).
  out = _run_script("""
  from functools import partial
  res = {}
  for platform in ("workshop", "cpu"):
    with jax.set_mesh(mesh_on(platform, (2,), ("fsdp",))):
      rng = np.random.RandomState(0)
      inputs = jax.device_put(jnp.asarray(rng.randn(4, 8, 16), jnp.float32), P(None, "fsdp"))
      targets = jax.device_put(jnp.asarray(rng.randn(4, 8, 16), jnp.float32), P(None, "fsdp"))
      params = {"w_in": jnp.asarray(rng.randn(2, 16, 64) * 0.1, jnp.float32),
                "w_out": jnp.asarray(rng.randn(2, 64, 16) * 0.1, jnp.float32)}
      params = jax.device_put(params, P(reduced={"fsdp"}))
      def stage(params, x):
        def layer(carry, p):
          h = jnp.dot(carry, p["w_in"], out_sharding=P("fsdp"))
          return jnp.dot(h, p["w_out"], out_sharding=P("fsdp")), None
        return jax.lax.scan(layer, x, params)[0]
      @jax.jit
      @partial(jax.vmap, in_axes=(None, 0, 0))
      @jax.value_and_grad
      def loss_fn(params, inputs, targets):
        return jnp.sum((stage(params, inputs) - targets) ** 2)
      loss, grads = loss_fn(params, inputs, targets)
      res[platform] = (np.asarray(loss), {k: np.asarray(reshard(g, P()))
                                          for k, g in grads.items()},
                       {k: g.sharding.spec for k, g in grads.items()})
  ours, ref = res["workshop"], res["cpu"]
  print("LOSS", np.allclose(ours[0], ref[0], rtol=1e-5))
  print("GRADS", all(np.allclose(ours[1][k], ref[1][k], rtol=1e-4, atol=1e-4) for k in ref[1]))
  print("SPECS", ours[2] == ref[2])
  """)
  assert "LOSS True" in out and "GRADS True" in out and "SPECS True" in out, out


def test_microbatch_gradients_are_all_reduced_once_as_cpu():
  # pjit_test.py::ShardingInTypesTest::test_minibatch_scan_unreduced_grad (and
  # _custom_vjp): four weights' gradients accumulated unreduced over a scan of
  # microbatches are resharded to P() after the loop. XLA:CPU's optimized program has
  # one all-reduce (its AllReduceCombiner); ours had four, one per weight.
  out = _run_script("""
  def model(ws, xs):
    for w in ws:
      xs = jnp.dot(xs, w)
    return jnp.sum(xs)
  @jax.jit
  def step(ws, xs):
    def body(acc, x):
      return jax.tree.map(jnp.add, acc, jax.grad(model)(ws, x)), None
    acc = reshard(jax.tree.map(jnp.zeros_like, ws), P(unreduced={"x"}))
    acc = reshard(jax.lax.scan(body, acc, xs)[0], P())
    return jax.tree.map(lambda w, g: reshard(w, P()) - g * 0.01, ws, acc)
  res = {}
  rng = np.random.RandomState(0)
  w0 = [rng.randn(4, 4).astype(np.float32) * 0.5 for _ in range(4)]
  x0 = rng.randn(2, 2, 4).astype(np.float32)
  for platform in ("workshop", "cpu"):
    with jax.set_mesh(mesh_on(platform, (2,), ("x",))):
      ws = tuple(jax.device_put(w, P(reduced={"x"})) for w in w0)
      xs = jax.device_put(x0, P(None, "x", None))
      text = step.lower(ws, xs).compile().as_text()
      res[platform] = ([np.asarray(w) for w in step(ws, xs)], text.count("all-reduce("))
  ours, ref = res["workshop"], res["cpu"]
  print("VALUES", all(np.allclose(a, b, rtol=1e-5, atol=1e-5) for a, b in zip(ours[0], ref[0])))
  print("ALL_REDUCES", ours[1], ref[1])
  """)
  assert "VALUES True" in out and "ALL_REDUCES 1 1" in out, out


def test_reshards_that_would_move_sub_axes_go_through_a_common_sharding():
  # pjit_test.py::ArrayPjitTest::test_pjit_array_single_output_fully_sharded_output,
  # test_prng_sharding_propagation_with_nested_jit: on a 4x2 mesh, x.T of an array
  # sharded P("x", "y") is resharded for the dot with collectives over the sub-axes
  # "x":(1)2 and "x":(2)2, which the guard refused (convert-global-to-local gets their
  # replica groups wrong). Sub-axes need an axis of 4 beside another: 8 devices.
  out = _run_script(
    """
  from jax.sharding import Mesh
  v = np.arange(16, dtype=np.float32).reshape(8, 2)
  w = np.arange(64, dtype=np.float32).reshape(8, 8)
  res = {}
  for platform in ("workshop", "cpu"):
    mesh = Mesh(np.array(jax.devices(platform)[:8]).reshape(4, 2), ("x", "y"))
    x = jax.device_put(v, NamedSharding(mesh, P("x", "y")))
    y = jax.device_put(w, NamedSharding(mesh, P("x", "y")))
    outs = []
    for spec in (P("x", "y"), P("y", "x"), P(None, "y"), P(("x", "y"))):
      f = jax.jit(lambda x: x @ x.T, out_shardings=NamedSharding(mesh, spec))
      outs.append(np.asarray(f(x)))
      g = jax.jit(lambda y: y.T + 1, out_shardings=NamedSharding(mesh, spec))
      outs.append(np.asarray(g(y)))
    res[platform] = outs
  want = [v @ v.T, w.T + 1] * 4
  print("SAME", all(np.array_equal(a, b) and np.array_equal(a, c)
                    for a, b, c in zip(res["workshop"], res["cpu"], want)))
  """,
    devices=8,
  )
  assert "SAME True" in out, out


def test_device_put_between_meshes_of_other_axes_over_the_same_devices():
  # pjit_test.py::ArrayPjitTest::test_device_put_efficient_reshard_complex_mesh_*,
  # test_device_put_donate_pytree, ShardingInTypesTest::test_abstract_mesh_changing_
  # names_sizes: the reshard JAX compiles from one mesh to another (other axis names and
  # sizes, another device order) is one reshard-to-collectives leaves alone, and
  # convert-global-to-local failed on it. Each shard must be the array's slice.
  out = _run_script(
    """
  from jax.sharding import Mesh
  ok = []
  for platform in ("workshop", "cpu"):
    dev = jax.devices(platform)[:8]
    m1 = Mesh(np.asarray(dev).reshape([1, 2, 2, 2]), ("replica", "data", "seq", "model"))
    m2 = Mesh(np.asarray(dev).reshape([1, 1, 2, 2, 2, 1]).swapaxes(2, 3)
              .reshape([1, 1, 4, 2, 1]), ("replica", "data", "seq", "model_q", "model_kv"))
    for shape in [(8, 2), (8, 384)]:
      v = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
      for src, dst in [(NamedSharding(m1, P("model")), NamedSharding(m2, P())),
                       (NamedSharding(m1, P("model")), NamedSharding(m2, P(None, "model_q"))),
                       (NamedSharding(m2, P("model_q")), NamedSharding(m1, P("model"))),
                       (NamedSharding(m2, P("seq", "model_q")),
                        NamedSharding(m1, P(("data", "seq"), "model")))]:
        x = jax.device_put(v, src)
        with jax.transfer_guard("disallow_explicit"):
          y = jax.device_put(x, dst)
        ok.append((platform, y.sharding == dst and
                   all(np.array_equal(s.data, v[s.index]) for s in y.addressable_shards)))
  print("OK", ok.count(("workshop", True)), ok.count(("cpu", True)))
  """,
    devices=8,
  )
  assert "OK 8 8" in out, out


def test_shard_map_over_some_axes_partitions_its_body_over_the_others():
  # jax.shard_map(f, axis_names={"x"}) of a value sharded on "y" too: the body is still
  # sharded over "y", and ops convert-global-to-local cannot partition there (a cumsum's
  # reduce_window aborted the process: "dimension 1 is sharded but is not a pass-through
  # dimension"; argmax's variadic reduce gave wrong values) run on the whole value, as
  # in @main. pjit_test.py::ShardingInTypesTest::test_manual_mode_mix_map: a lax.map's
  # dynamic_slice of a loop carry there kept its global slice sizes.
  out = _run_script("""
  from functools import partial
  from jax.sharding import Mesh
  bodies = {
    "slice": lambda x: x[:, 1:5] * 2,
    "cumsum": lambda x: jnp.cumsum(x, axis=1),
    "sort": lambda x: jnp.sort(x, axis=1),
    "reverse": lambda x: x[:, ::-1],
    "pad": lambda x: jnp.pad(x, ((0, 0), (1, 2))),
    "gather": lambda x: x[:, jnp.array([5, 0, 3])],
    "dot": lambda x: x @ x.T,
    "argmax": lambda x: jnp.argmax(x, axis=1).astype(jnp.float32)[:, None],
    "map": lambda x: jax.lax.map(lambda r: jnp.sum(r * r), x, batch_size=2)[:, None],
  }
  v = np.random.RandomState(0).randn(4, 8).astype(np.float32)
  res = {}
  for platform in ("workshop", "cpu"):
    mesh = Mesh(np.array(jax.devices(platform)[:4]).reshape(2, 2), ("x", "y"))
    x = jax.device_put(v, NamedSharding(mesh, P("x", "y")))
    res[platform] = {
      name: np.asarray(jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"),
                                              out_specs=P("x"), axis_names={"x"}))(x))
      for name, body in bodies.items()}
  for name in bodies:
    print(name, np.allclose(res["workshop"][name], res["cpu"][name], rtol=1e-5, atol=1e-5))
  # The same shard_map in a scan's and a cond's body, which run whole (replicated): its
  # in-shardings still sharded the body over "y" and a cumsum there aborted the process.
  for platform in ("workshop", "cpu"):
    mesh = Mesh(np.array(jax.devices(platform)[:4]).reshape(2, 2), ("x", "y"))
    x = jax.device_put(v, NamedSharding(mesh, P("x", "y")))
    res[platform] = {}
    for body in ("cumsum", "argmax"):
      inner = jax.shard_map(bodies[body], mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                            axis_names={"x"})
      res[platform][body + " in scan"] = np.asarray(jax.jit(lambda a: jax.lax.scan(
          lambda c, _: (c + inner(c).sum(), None), a, None, length=2)[0])(x))
      res[platform][body + " in cond"] = np.asarray(jax.jit(lambda a: jax.lax.cond(
          a.sum() > 0, lambda b: inner(b).sum() + b, lambda b: b, a))(x))
  for name in res["cpu"]:
    print(name, np.allclose(res["workshop"][name], res["cpu"][name], rtol=1e-5, atol=1e-5))
  """)
  assert out.count("True") == 13 and "False" not in out, out


def test_sharded_to_unreduced_places_each_shard_in_zeros_as_cpu():
  # pjit_test.py::ShardingInTypesTest::test_sharded_unreduced_roundtrip*: a reshard from
  # sharded to unreduced is sdy.sharded_to_unreduced, which convert-global-to-local
  # cannot lower (the fallback ran it whole and every device kept the whole value: the
  # reshard back summed it twice); each device puts its shard in zeros, as XLA:CPU does.
  out = _run_script("""
  cases = [(P("x"), P(None, unreduced={"x"})),
           (P("x", "y"), P(None, None, unreduced={"x", "y"})),
           (P("x", "y"), P("x", None, unreduced={"y"})),
           (P("x", "y"), P(None, "y", unreduced={"x"})),
           (P(("x", "y"), None), P(None, None, unreduced={"x", "y"}))]
  results = {}
  for platform in ("workshop", "cpu"):
    with jax.set_mesh(mesh_on(platform, (2, 2), ("x", "y"))):
      results[platform] = []
      for orig, un in cases:
        v = np.arange(8).reshape((8,) if len(orig) == 1 else (4, 2))
        arr = reshard(jax.device_put(v, orig), un)
        back = reshard(arr, orig)
        results[platform].append(([np.asarray(s.data) for s in arr.addressable_shards],
                                  np.asarray(back), arr.sharding.spec == un))
  for (orig, un), o, r in zip(cases, results["workshop"], results["cpu"]):
    ok = (all(np.array_equal(a, b) for a, b in zip(o[0], r[0])) and o[2] and
          np.array_equal(o[1], r[1]) and np.array_equal(o[1], np.arange(8).reshape(o[1].shape)))
    print("CASE", orig, un, ok)
  """)
  assert out.count("CASE") == 5 and "False" not in out, out


def test_scatter_add_into_an_unreduced_result_keeps_partial_sums_as_cpu():
  # pjit_test.py::ShardingInTypesTest::test_bincount, test_segment_sum: a scatter-add
  # (bincount, segment_sum) of updates sharded over "x" into an `unreduced` result. It
  # ran whole and only the device at coordinate 0 kept the sum; XLA:CPU keeps each
  # device's scatter of its own updates, and so do we (the shards, not only their sum).
  # Into a whole, nonzero operand (`b.at[i].add(u, out_sharding=...)`), the devices at
  # coordinate 0 of the unreduced axes add into the operand, the others into zeros.
  out = _run_script("""
  ids = np.asarray([1, 1, 0, 1, 3, 3, 0, 1], np.int32)
  results = {}
  for platform in ("workshop", "cpu"):
    with jax.set_mesh(mesh_on(platform, (4,), ("x",))):
      a = jax.device_put(ids, P("x"))
      b = jax.device_put(np.arange(8, dtype=np.float32), P("x"))
      bincount = jax.jit(lambda x, s: jnp.bincount(x, length=4, out_sharding=s),
                         static_argnums=1)
      segsum = jax.jit(lambda x, y, s: jax.ops.segment_sum(x, y, num_segments=4,
                                                           out_sharding=s), static_argnums=2)
      runs = []
      for out in (bincount(a, P(unreduced={"x"})), segsum(b, a, P(unreduced={"x"}))):
        runs.append(([np.asarray(s.data) for s in out.addressable_shards],
                     np.asarray(reshard(out, P())), out.sharding.spec))
      results[platform] = runs
  whole = [np.bincount(ids, minlength=4), np.bincount(ids, np.arange(8), minlength=4)]
  for name, ours, ref, want in zip(("bincount", "segment_sum"), results["workshop"],
                                   results["cpu"], whole):
    print(name, "SHARDS", all(np.array_equal(a, b) for a, b in zip(ours[0], ref[0])))
    print(name, "SUM", np.array_equal(ours[1], ref[1]) and np.array_equal(ours[1], want))
    print(name, "SPEC", ours[2] == ref[2])
  """)
  assert out.count("True") == 6 and "False" not in out, out
  out = _run_script("""
  ids = np.asarray([1, 1, 0, 1, 3, 3, 0, 1], np.int32)
  cases = [(P(("x", "y")), {"x", "y"}), (P("x"), {"x"}), (P("y"), {"y"}),
           (P(("y", "x")), {"x", "y"})]
  results = {}
  for platform in ("workshop", "cpu"):
    with jax.set_mesh(mesh_on(platform, (2, 2), ("x", "y"))):
      results[platform] = []
      for spec, axes in cases:
        f = jax.jit(lambda b, i, u: b.at[i].add(u, out_sharding=P(unreduced=axes)))
        out = f(jnp.arange(4.0) + 10, jax.device_put(ids, spec),
                jax.device_put(np.arange(8, dtype=np.float32), spec))
        results[platform].append(([np.asarray(s.data) for s in out.addressable_shards],
                                  np.asarray(reshard(out, P()))))
  want = np.arange(4.0) + 10 + np.bincount(ids, np.arange(8), minlength=4)
  for case, ours, ref in zip(cases, results["workshop"], results["cpu"]):
    print(case, all(np.array_equal(a, b) for a, b in zip(ours[0], ref[0])),
          np.array_equal(ours[1], ref[1]) and np.array_equal(ours[1], want))
  """)
  assert out.count("True") == 8 and "False" not in out, out


def test_value_constrained_unreduced_is_kept_on_one_device_per_group_as_cpu():
  # pjit_test.py::ShardingInTypesTest::test_cet_unreduced: jnp.array(x, out_sharding=
  # P(unreduced={"x"})) is a convert whose result propagation made unreduced; every
  # device held x (the sum over "x" counted it twice). XLA:CPU keeps x on the device at
  # coordinate 0 of "x" and zeros on the other.
  out = _run_script("""
  results = {}
  for platform in ("workshop", "cpu"):
    with jax.set_mesh(mesh_on(platform, (2,), ("x",))):
      x = jnp.array([[1, 2], [3, 4]])
      out = jnp.array(x, out_sharding=P(unreduced={"x"}))
      results[platform] = ([np.asarray(s.data) for s in out.addressable_shards],
                           np.asarray(reshard(out, P())), out.sharding.spec)
  ours, ref = results["workshop"], results["cpu"]
  print("SHARDS", all(np.array_equal(a, b) for a, b in zip(ours[0], ref[0])))
  print("SUM", np.array_equal(ours[1], ref[1]) and np.array_equal(ours[1], [[1, 2], [3, 4]]))
  print("SPEC", ours[2] == ref[2])
  """)
  assert "SHARDS True" in out and "SUM True" in out and "SPEC True" in out, out


@pytest.mark.parametrize(
  "name,f",
  [
    ("elementwise", lambda x, p: jax.lax.cond(p, jnp.sin, jnp.cos, x)),
    ("reduction", lambda x, p: jax.lax.cond(p, lambda v: v.sum(0), lambda v: v.max(0), x)),
    (
      "contracting dot",
      lambda x, p: jax.lax.cond(p, lambda v: v.T @ v, lambda v: v.T @ (v + 1), x),
    ),
    ("predicate from data", lambda x, p: jax.lax.cond(x.sum() > 10, jnp.exp, jnp.tanh, x)),
    ("switch", lambda x, p: jax.lax.switch(p.astype(int) * 2, [jnp.sin, jnp.cos, jnp.tanh], x)),
    (
      "loop inside",
      lambda x, p: jax.lax.cond(
        p, lambda v: jax.lax.fori_loop(0, 3, lambda i, c: c * 1.5, v), lambda v: v, x
      ),
    ),
    (
      "sort inside (runs whole)",
      lambda x, p: jax.lax.cond(p, lambda v: jnp.sort(v, axis=0), lambda v: v, x),
    ),
    (
      "several results",
      lambda x, p: jax.lax.cond(p, lambda v: (v.sum(0), v * 2), lambda v: (v.max(0), v), x),
    ),
    (
      "gradient",
      jax.grad(lambda x, p: jax.lax.cond(p, lambda v: (jnp.sin(v) ** 2).sum(), jnp.sum, x)),
    ),
  ],
  ids=lambda v: v if isinstance(v, str) else "",
)
def test_conditionals_on_sharded_operands_match_cpu(name, f):
  # A conditional whose branches run on shards stays sharded, collectives inside it
  # included (every device takes the same branch: the predicate is whole); one with an op
  # that runs whole runs whole. Values and output shardings as on the CPU backend.
  outs = {}
  for platform in ("workshop", "cpu"):
    mesh = jax.make_mesh(
      (2, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices(platform)[:4]
    )
    x = jax.device_put(
      np.arange(32, dtype=np.float32).reshape(8, 4) / 7, NamedSharding(mesh, P("x", "y"))
    )
    outs[platform] = jax.jit(f)(x, True)
  for a, b in zip(jax.tree.leaves(outs["workshop"]), jax.tree.leaves(outs["cpu"]), strict=True):
    assert a.sharding.spec == b.sharding.spec, name
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-6, atol=1e-6)


_NHWC = ("NHWC", "HWIO", "NHWC")


def _conv(x, w, groups=1):
  return jax.lax.conv_general_dilated(
    x, w, (1, 1), "SAME", dimension_numbers=_NHWC, feature_group_count=groups
  )


def _max_pool(h):
  return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


@pytest.mark.parametrize(
  "name,f,x_spec,w_spec,groups",
  [
    ("batch", _conv, P("x"), P(), 1),
    ("batch over both axes", _conv, P(("x", "y")), P(), 1),
    ("output features", _conv, P(), P(None, None, None, "y"), 1),
    ("batch and output features", _conv, P("x"), P(None, None, None, "y"), 1),
    ("input features (partial sums)", _conv, P(None, None, None, "y"), P(None, None, "y"), 1),
    ("spatial (runs whole)", _conv, P(None, "x"), P(), 1),
    ("depthwise, batch", _conv, P("x"), P(), 4),
    (
      "depthwise, features (runs whole)",
      _conv,
      P(None, None, None, "y"),
      P(None, None, None, "y"),
      4,
    ),
    ("weight gradient", jax.grad(lambda x, w, g: (_conv(x, w, g) ** 2).sum(), 1), P("x"), P(), 1),
    (
      "input gradient",
      jax.grad(lambda x, w, g: (jnp.tanh(_conv(x, w, g)) ** 2).sum()),
      P("x"),
      P(),
      1,
    ),
    (
      "depthwise weight gradient",
      jax.grad(lambda x, w, g: (_conv(x, w, g) ** 2).sum(), 1),
      P(("x", "y")),
      P(),
      4,
    ),
    (
      "max-pool gradient",
      jax.grad(lambda x, w, g: (_max_pool(_conv(x, w, g)) ** 2).sum()),
      P("x"),
      P(),
      1,
    ),
    (
      "max-pool gradient, spatial (runs whole)",
      jax.grad(lambda x, w, g: (_max_pool(_conv(x, w, g)) ** 2).sum()),
      P(None, "x"),
      P(),
      1,
    ),
  ],
  ids=lambda v: v if isinstance(v, str) else "",
)
def test_convolutions_and_pooling_on_sharded_operands_match_one_device(
  name, f, x_spec, w_spec, groups
):
  # Convolutions sharded along batch and feature dims run on shards (a data-parallel CNN
  # step stays data-parallel; the weight gradient contracts the batch: a partial sum and
  # an all-reduce), the max-pool gradient (select_and_scatter) too; spatial shardings and
  # grouped features run whole. Against the program on one CPU device: XLA:CPU's own
  # partitioner doubles the depthwise weight gradient when the batch is sharded over one
  # axis of a 2x2 mesh (jaxlib 0.10.2), so the reference is unpartitioned.
  rng = np.random.default_rng(0)
  x = rng.normal(size=(8, 6, 6, 4)).astype(np.float32)
  w = rng.normal(size=(3, 3, 4 // groups, 8 if groups == 1 else 4)).astype(np.float32) * 0.3
  g = jax.jit(f, static_argnums=2)
  ref = g(
    jax.device_put(x, jax.devices("cpu")[0]), jax.device_put(w, jax.devices("cpu")[0]), groups
  )
  mesh = jax.make_mesh(
    (2, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices("workshop")[:4]
  )
  ours = g(
    jax.device_put(x, NamedSharding(mesh, x_spec)),
    jax.device_put(w, NamedSharding(mesh, w_spec)),
    groups,
  )
  np.testing.assert_allclose(
    np.asarray(ours), np.asarray(ref), rtol=2e-5, atol=2e-4 * np.abs(ref).max()
  )


def _take(lp, labels):
  return jnp.take_along_axis(lp, labels[..., None], axis=-1)[..., 0]


@pytest.mark.parametrize(
  "name,f,specs",
  [
    ("take_along_axis, batch sharded", _take, (P("x"), P("x"))),
    ("take_along_axis, batch over both axes", _take, (P(("x", "y")), P(("x", "y")))),
    ("take_along_axis, classes sharded (runs whole)", _take, (P("x", None, "y"), P("x"))),
    (
      "its gradient (scatter along batching dims)",
      jax.grad(lambda lp, l: (_take(jnp.tanh(lp), l) ** 2).sum()),
      (P("x", "y"), P("x", "y")),
    ),
    (
      "cross-entropy gradient",
      jax.grad(lambda lp, l: -_take(jax.nn.log_softmax(lp), l).mean()),
      (P("x"), P("x")),
    ),
    (
      "embedding gradient (partial sums)",
      jax.grad(lambda t, i: (jnp.sin(t[i]) ** 2).sum()),
      (P(), P("x", "y")),
    ),
    (
      "scatter-add into a whole table",
      lambda t, i: t.at[i].add(jnp.cos(i[..., None] * 1.0)),
      (P(), P("x")),
    ),
    (
      "scatter-max (runs whole)",
      lambda t, i: t.at[i].max(jnp.cos(i[..., None] * 1.0)),
      (P(), P("x")),
    ),
    (
      "segment_sum",
      lambda t, i: jax.ops.segment_sum(t[i].reshape(48, 5), i.reshape(48), 20),
      (P(), P("x")),
    ),
    (
      "argmax along an unsharded dim",
      lambda lp, l: jnp.argmax(lp, -1) + l,
      (P("x", "y"), P("x", "y")),
    ),
    ("argmax along a sharded dim (runs whole)", lambda lp, l: jnp.argmax(lp, 0), (P("x"), P())),
    (
      "variadic reduce along an unsharded dim",
      lambda lp, l: jax.lax.reduce(
        (lp, -lp), (0.0, 0.0), lambda a, b: (a[0] + b[0], jnp.maximum(a[1], b[1])), (2,)
      ),
      (P("x"), P()),
    ),
  ],
  ids=lambda v: v if isinstance(v, str) else "",
)
def test_indexing_and_reductions_on_sharded_operands_match_cpu(name, f, specs):
  # A gather or scatter along batching dims (take_along_axis and its gradient) runs on each
  # device's batch rows; a scatter-add of batch-sharded updates into a whole result (an
  # embedding's gradient in a data-parallel step) scatters each device's updates and
  # all-reduces; reductions along unsharded dims run on shards whatever their body.
  # Values and output shardings as on the CPU backend.
  rng = np.random.default_rng(0)
  sizes = {"take": ((8, 6, 10), 10), "table": ((20, 5), 20)}
  first, bound = sizes["table"] if specs[0] == P() and "argmax" not in name else sizes["take"]
  a = rng.normal(size=first).astype(np.float32)
  labels = rng.integers(0, bound, (8, 6))
  outs = {}
  for platform in ("workshop", "cpu"):
    mesh = jax.make_mesh(
      (2, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices(platform)[:4]
    )
    args = [jax.device_put(v, NamedSharding(mesh, s)) for v, s in zip((a, labels), specs)]
    outs[platform] = jax.jit(f)(*args)
  for x, y in zip(jax.tree.leaves(outs["workshop"]), jax.tree.leaves(outs["cpu"]), strict=True):
    assert x.sharding.spec == y.sharding.spec, name
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-6, atol=1e-6)


def test_weight_gradient_through_a_sliced_output_does_not_abort():
  # A data-parallel LM step's last Dense layer: logits[:, :-1] makes the gradient a pad
  # whose zero is Shardy's sdy.constant, and the weight gradient contracts the sharded
  # batch of that pad; convert-global-to-local CHECK-aborted the process ("Padding value
  # must be zero for sharded contracting dot_general": it sees only stablehlo.constant).
  out = _run_script("""
  f = jax.jit(jax.grad(lambda w, x: (jax.nn.log_softmax((x @ w)[:, :-1]) * jnp.cos(x[:, 1:, :32])).sum()))
  rng = np.random.default_rng(0)
  w0 = rng.normal(size=(64, 32)).astype(np.float32) * 0.1
  x0 = rng.normal(size=(8, 16, 64)).astype(np.float32)
  outs = []
  for platform in ("workshop", "cpu"):
    mesh = jax.make_mesh((4,), ("b",), axis_types=(AxisType.Auto,), devices=jax.devices(platform)[:4])
    outs.append(np.asarray(f(jax.device_put(w0, NamedSharding(mesh, P())), jax.device_put(x0, NamedSharding(mesh, P("b"))))))
  print("MATCH", np.allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5))
  """)
  assert "MATCH True" in out, out
