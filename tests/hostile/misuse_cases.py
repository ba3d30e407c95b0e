"""The C API misuse corpus: each case drives the plugin wrongly on purpose and asserts the
plugin answers with an error (never a crash). Run one case per process:

  python tests/hostile/misuse_cases.py CASE [--plugin PATH]

One file of about 1,300 lines on purpose: each case runs as `python misuse_cases.py CASE`
in a process of its own, so the corpus and its ctypes bindings of the C API live in the
script the child runs.

test_misuse.py runs every case in a child process and fails on a signal or a non-zero
exit. `--plugin` points at another build (e.g. the sanitizer build).
"""

from __future__ import annotations

import ctypes
import sys

from pjrt import INVALID_ARGUMENT, Api, int64s

CASES = {}


def case(fn):
  CASES[fn.__name__] = fn
  return fn


# ---- Null, short and zeroed argument structs, for every slot of the table.

VOID_SLOTS = {"PJRT_Error_Destroy", "PJRT_Error_Message"}


@case
def every_slot_rejects_null_args(api: Api):
  for name in api.header.slots:
    if name in VOID_SLOTS:
      api.raw(name, None)  # Nothing to report through; must simply not crash.
      continue
    api_error = api.error(api.raw(name, None))
    assert api_error is not None, f"{name} accepted NULL args"
    code, message = api_error
    assert code == INVALID_ARGUMENT and message.startswith(f"{name}: args is NULL"), (name, message)


@case
def every_slot_rejects_a_short_struct_size(api: Api):
  for name in api.header.slots:
    args = (ctypes.c_uint64 * 64)(8)  # struct_size 8: only struct_size itself
    if name in VOID_SLOTS:
      api.raw(name, ctypes.addressof(args))
      continue
    code, message = api.error(api.raw(name, ctypes.addressof(args)))
    assert code == INVALID_ARGUMENT, (name, message)
    assert f"{name}_Args.struct_size 8 is smaller" in message, (name, message)


@case
def every_slot_survives_zeroed_args(api: Api):
  # Larger than any Args struct, all fields NULL/0: accepted size, missing handles.
  for name in api.header.slots:
    args = (ctypes.c_uint64 * 64)(512)
    if name in VOID_SLOTS:
      api.raw(name, ctypes.addressof(args))
      continue
    api.error(api.raw(name, ctypes.addressof(args)))  # any answer but a crash


PJRT_EXTENSION_TYPE_PROFILER = 1  # PJRT_Extension_Type_Profiler in pjrt_c_api.h


@case
def extension_slots_check_their_args(api: Api):
  # Walk the extension chain: every extension slot goes through the same entry.
  ext = ctypes.cast(api.table[1], ctypes.POINTER(ctypes.c_uint64))
  seen = profiler_functions = 0
  while ext:
    size = ext[0]
    if ext[1] == PJRT_EXTENSION_TYPE_PROFILER:
      # Not PJRT slots: a pointer to the PLUGIN_Profiler_Api table (struct_size, priv,
      # then error_destroy, error_message, error_get_code, create, destroy, start, stop,
      # collect_data). The first two return nothing; the others must return an error.
      table = ctypes.cast(ext[3], ctypes.POINTER(ctypes.c_uint64))
      for i in range(2, table[0] // 8):
        result = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(table[i])(None)
        assert i < 4 or result, f"profiler function {i - 2} accepted NULL args"
        profiler_functions += 1
      ext = ctypes.cast(ext[2], ctypes.POINTER(ctypes.c_uint64))
      continue
    for i in range(3, size // 8):  # struct_size, type, next, then slots
      fn = ext[i]
      err = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(fn)(None)
      code, message = api.error(err)
      assert code == INVALID_ARGUMENT and "args is NULL" in message, message
      seen += 1
    ext = ctypes.cast(ext[2], ctypes.POINTER(ctypes.c_uint64))
  assert seen == 9, seen
  assert profiler_functions == 8, profiler_functions


# ---- Destroyed and foreign handles.


@case
def buffer_double_destroy(api: Api):
  client = api.client()
  buf = api.buffer(client, [1, 2, 3, 4], [4])
  api.ok("PJRT_Buffer_Destroy", api.args("PJRT_Buffer_Destroy", buffer=buf))
  api.expect(
    "PJRT_Buffer_Destroy",
    api.args("PJRT_Buffer_Destroy", buffer=buf),
    INVALID_ARGUMENT,
    "PJRT_Buffer_Destroy: buffer is a destroyed PJRT_Buffer",
  )


@case
def buffer_use_after_destroy(api: Api):
  client = api.client()
  buf = api.buffer(client, [1, 2], [2])
  api.ok("PJRT_Buffer_Destroy", api.args("PJRT_Buffer_Destroy", buffer=buf))
  for name in [
    "PJRT_Buffer_Dimensions",
    "PJRT_Buffer_ElementType",
    "PJRT_Buffer_IsDeleted",
    "PJRT_Buffer_ReadyEvent",
    "PJRT_Buffer_Delete",
    "PJRT_Buffer_Device",
  ]:
    api.expect(name, api.args(name, buffer=buf), INVALID_ARGUMENT, "destroyed PJRT_Buffer")
  api.expect(
    "PJRT_Buffer_ToHostBuffer",
    api.args("PJRT_Buffer_ToHostBuffer", src=buf),
    INVALID_ARGUMENT,
    "src is a destroyed PJRT_Buffer",
  )


@case
def event_double_destroy_and_use(api: Api):
  client = api.client()
  buf = api.buffer(client, [1.0], [1])
  ev = api.ok("PJRT_Buffer_ReadyEvent", api.args("PJRT_Buffer_ReadyEvent", buffer=buf)).event
  api.ok("PJRT_Event_Destroy", api.args("PJRT_Event_Destroy", event=ev))
  for name in ["PJRT_Event_Destroy", "PJRT_Event_IsReady", "PJRT_Event_Await", "PJRT_Event_Error"]:
    api.expect(name, api.args(name, event=ev), INVALID_ARGUMENT, "destroyed PJRT_Event")


@case
def error_double_destroy_and_use(api: Api):
  err = api.raw("PJRT_Client_Devices", None)  # some error
  api.call("PJRT_Error_Destroy", api.args("PJRT_Error_Destroy", error=err))
  api.call("PJRT_Error_Destroy", api.args("PJRT_Error_Destroy", error=err))  # no-op
  msg = api.args("PJRT_Error_Message", error=err)
  api.call("PJRT_Error_Message", msg)
  assert b"invalid PJRT_Error" in ctypes.string_at(msg.message, msg.message_size)
  api.expect(
    "PJRT_Error_GetCode",
    api.args("PJRT_Error_GetCode", error=err),
    INVALID_ARGUMENT,
    "destroyed PJRT_Error",
  )


@case
def handle_of_another_type(api: Api):
  client = api.client()
  buf = api.buffer(client, [1.0], [1])
  ev = api.ok("PJRT_Buffer_ReadyEvent", api.args("PJRT_Buffer_ReadyEvent", buffer=buf)).event
  api.expect(
    "PJRT_Buffer_Dimensions",
    api.args("PJRT_Buffer_Dimensions", buffer=ev),
    INVALID_ARGUMENT,
    "buffer is not a PJRT_Buffer",
  )
  api.expect(
    "PJRT_Event_IsReady",
    api.args("PJRT_Event_IsReady", event=buf),
    INVALID_ARGUMENT,
    "event is not a PJRT_Event",
  )
  api.expect(
    "PJRT_Client_Devices",
    api.args("PJRT_Client_Devices", client=buf),
    INVALID_ARGUMENT,
    "client is not a PJRT_Client",
  )
  device = api.devices(client)[0]
  api.expect(
    "PJRT_Memory_Kind",
    api.args("PJRT_Memory_Kind", memory=device),
    INVALID_ARGUMENT,
    "memory is not a PJRT_Memory",
  )


@case
def client_and_devices_after_client_destroy(api: Api):
  client = api.client()
  device = api.devices(client)[0]
  api.ok("PJRT_Client_Destroy", api.args("PJRT_Client_Destroy", client=client))
  api.expect(
    "PJRT_Client_Destroy",
    api.args("PJRT_Client_Destroy", client=client),
    INVALID_ARGUMENT,
    "destroyed PJRT_Client",
  )
  api.expect(
    "PJRT_Client_Devices",
    api.args("PJRT_Client_Devices", client=client),
    INVALID_ARGUMENT,
    "destroyed PJRT_Client",
  )
  api.expect(
    "PJRT_Device_LocalHardwareId",
    api.args("PJRT_Device_LocalHardwareId", device=device),
    INVALID_ARGUMENT,
    "destroyed PJRT_Device",
  )


@case
def client_topology_is_not_destroyable(api: Api):
  client = api.client()
  topo = api.ok(
    "PJRT_Client_TopologyDescription", api.args("PJRT_Client_TopologyDescription", client=client)
  ).topology
  api.expect(
    "PJRT_TopologyDescription_Destroy",
    api.args("PJRT_TopologyDescription_Destroy", topology=topo),
    INVALID_ARGUMENT,
    "belongs to its client",
  )
  api.ok(
    "PJRT_TopologyDescription_PlatformName",
    api.args("PJRT_TopologyDescription_PlatformName", topology=topo),
  )


@case
def execute_context_double_destroy(api: Api):
  ctx = api.ok("PJRT_ExecuteContext_Create", api.args("PJRT_ExecuteContext_Create")).context
  api.ok("PJRT_ExecuteContext_Destroy", api.args("PJRT_ExecuteContext_Destroy", context=ctx))
  api.expect(
    "PJRT_ExecuteContext_Destroy",
    api.args("PJRT_ExecuteContext_Destroy", context=ctx),
    INVALID_ARGUMENT,
    "destroyed PJRT_ExecuteContext",
  )


# ---- Bad (pointer, size) pairs and strings.


@case
def null_dims_with_a_count(api: Api):
  client = api.client()
  data = (ctypes.c_float * 4)()
  api.expect(
    "PJRT_Client_BufferFromHostBuffer",
    api.args(
      "PJRT_Client_BufferFromHostBuffer",
      client=client,
      data=ctypes.addressof(data),
      type=11,
      dims=None,
      num_dims=2,
      device=api.devices(client)[0],
    ),
    INVALID_ARGUMENT,
    "dims is NULL but num_dims is 2",
  )
  dims, dims_p = int64s([4])
  api.expect(
    "PJRT_Client_BufferFromHostBuffer",
    api.args(
      "PJRT_Client_BufferFromHostBuffer",
      client=client,
      data=ctypes.addressof(data),
      type=11,
      dims=dims_p,
      num_dims=1,
      byte_strides=None,
      num_byte_strides=1,
      device=api.devices(client)[0],
    ),
    INVALID_ARGUMENT,
    "byte_strides is NULL",
  )


@case
def create_option_with_null_name(api: Api):
  nv_cls = type(
    "NV",
    (ctypes.Structure,),
    {
      "_fields_": [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.c_void_p),
        ("name", ctypes.c_void_p),
        ("name_size", ctypes.c_size_t),
        ("type", ctypes.c_int),
        ("value", ctypes.c_void_p),
        ("value_size", ctypes.c_size_t),
      ]
    },
  )
  # Was std::string(nullptr, 11): std::logic_error through extern "C", process aborted.
  option = nv_cls(struct_size=56, name=None, name_size=11, type=1, value=4, value_size=1)
  api.expect(
    "PJRT_Client_Create",
    api.args("PJRT_Client_Create", create_options=ctypes.addressof(option), num_options=1),
    INVALID_ARGUMENT,
    "create_options[0].name is NULL",
  )
  name = ctypes.create_string_buffer(b"num_devices")
  option = nv_cls(
    struct_size=56, name=ctypes.addressof(name), name_size=11, type=0, value=None, value_size=3
  )
  api.expect(
    "PJRT_Client_Create",
    api.args("PJRT_Client_Create", create_options=ctypes.addressof(option), num_options=1),
    INVALID_ARGUMENT,
    "string_value is NULL",
  )
  api.expect(
    "PJRT_Client_Create",
    api.args("PJRT_Client_Create", create_options=None, num_options=3),
    INVALID_ARGUMENT,
    "create_options is NULL",
  )


@case
def compile_with_bad_program(api: Api):
  client = api.client()
  api.expect(
    "PJRT_Client_Compile",
    api.args("PJRT_Client_Compile", client=client, program=None),
    INVALID_ARGUMENT,
    "program is NULL",
  )
  # PJRT_Program: struct_size, extension_start, code, code_size, format, format_size.
  raw = (ctypes.c_uint64 * 6)(48, 0, 0, 100, 0, 4)
  api.expect(
    "PJRT_Client_Compile",
    api.args("PJRT_Client_Compile", client=client, program=ctypes.addressof(raw)),
    INVALID_ARGUMENT,
    "program->code is NULL but program->code_size is 100",
  )
  empty = (ctypes.c_uint64 * 6)(48, 0, 0, 0, 0, 0)
  api.expect(
    "PJRT_Client_Compile",
    api.args(
      "PJRT_Client_Compile",
      client=client,
      program=ctypes.addressof(empty),
      compile_options=None,
      compile_options_size=9,
    ),
    INVALID_ARGUMENT,
    "compile_options is NULL",
  )


@case
def deserialize_garbage(api: Api):
  client = api.client()
  api.expect(
    "PJRT_Executable_DeserializeAndLoad",
    api.args(
      "PJRT_Executable_DeserializeAndLoad",
      client=client,
      serialized_executable=None,
      serialized_executable_size=10,
    ),
    INVALID_ARGUMENT,
    "serialized_executable is NULL",
  )
  for blob in [
    b"",
    b"WSEX",
    b"\x04\0\0\0\0\0\0\0WSEX\x02\0\0\0",
    b"\xff" * 64,
    b"\x04\0\0\0\0\0\0\0WSEX\x01\0\0\0" + b"\0" * 40,
  ]:
    data = ctypes.create_string_buffer(blob, max(1, len(blob)))
    api.expect(
      "PJRT_Executable_DeserializeAndLoad",
      api.args(
        "PJRT_Executable_DeserializeAndLoad",
        client=client,
        serialized_executable=ctypes.addressof(data),
        serialized_executable_size=len(blob),
      ),
      INVALID_ARGUMENT,
    )


@case
def execute_with_null_lists(api: Api):
  api.expect(
    "PJRT_LoadedExecutable_Execute",
    api.args("PJRT_LoadedExecutable_Execute"),
    INVALID_ARGUMENT,
    "executable is NULL",
  )


@case
def raw_copy_out_of_range(api: Api):
  client = api.client()
  buf = api.buffer(client, [1, 2, 3, 4], [4])
  dst = (ctypes.c_char * 16)()
  for offset, size in [(-1, 4), (0, 17), (15, 2), (2**62, 2**62)]:
    api.expect(
      "PJRT_Buffer_CopyRawToHost",
      api.args(
        "PJRT_Buffer_CopyRawToHost",
        buffer=buf,
        dst=ctypes.addressof(dst),
        offset=offset,
        transfer_size=size,
      ),
      INVALID_ARGUMENT,
    )


@case
def to_host_with_small_destination(api: Api):
  client = api.client()
  buf = api.buffer(client, [1, 2, 3, 4], [4])
  dst = (ctypes.c_char * 16)()
  api.expect(
    "PJRT_Buffer_ToHostBuffer",
    api.args("PJRT_Buffer_ToHostBuffer", src=buf, dst=ctypes.addressof(dst), dst_size=15),
    INVALID_ARGUMENT,
    "dst_size 15",
  )


@case
def default_assignment_counts(api: Api):
  client = api.client()
  assignment = (ctypes.c_int * 4)()
  # (-1) x (-1) made a size of 1 and was answered (session 14).
  for replicas, partitions in [(-1, -1), (-1, 1), (2, -3)]:
    api.expect(
      "PJRT_Client_DefaultDeviceAssignment",
      api.args(
        "PJRT_Client_DefaultDeviceAssignment",
        client=client,
        num_replicas=replicas,
        num_partitions=partitions,
        default_assignment=ctypes.addressof(assignment),
        default_assignment_size=4,
      ),
      INVALID_ARGUMENT,
      "must not be negative",
    )
  api.ok(
    "PJRT_Client_DefaultDeviceAssignment",
    api.args(
      "PJRT_Client_DefaultDeviceAssignment",
      client=client,
      num_replicas=2,
      num_partitions=2,
      default_assignment=ctypes.addressof(assignment),
      default_assignment_size=4,
    ),
  )
  assert list(assignment) == [0, 1, 2, 3], list(assignment)


@case
def device_lookup_out_of_range(api: Api):
  client = api.client()
  for i in [-1, 4, 2**31 - 1]:
    api.expect(
      "PJRT_Client_LookupDevice",
      api.args("PJRT_Client_LookupDevice", client=client, id=i),
      INVALID_ARGUMENT,
    )


@case
def fulfill_alias_twice(api: Api):
  client = api.client()
  dims, dims_p = int64s([2])
  memory = ctypes.cast(api.default_memory(api.devices(client)[0]), ctypes.c_void_p)
  a = api.ok(
    "PJRT_Client_CreateAliasBuffer",
    api.args(
      "PJRT_Client_CreateAliasBuffer",
      client=client,
      memory=memory,
      shape_dims=dims_p,
      shape_num_dims=1,
      shape_element_type=11,
    ),
  )
  src = api.buffer(client, [1, 2], [2])
  fulfill = dict(
    client=client, buffer=src, status_code=0, fulfill_alias_buffer_cb=a.fulfill_alias_buffer_cb
  )
  api.ok("PJRT_Client_FulfillAliasBuffer", api.args("PJRT_Client_FulfillAliasBuffer", **fulfill))
  api.expect(
    "PJRT_Client_FulfillAliasBuffer",
    api.args("PJRT_Client_FulfillAliasBuffer", **fulfill),
    INVALID_ARGUMENT,
    "destroyed PJRT_FulfillAliasBufferCallback",
  )


# ---- Shapes whose sizes overflow (also in test_overflow.py against XLA's CPU plugin).

OVERFLOW_DIMS = [
  [2**32, 2**32, 16],
  [2**61 + 1, 8],
  [4] * 100,
  [2**62, 2**62, 0],
  [-1, 4],
  [2**63 - 1, 2],
]


@case
def overflow_dims_everywhere(api: Api):
  client = api.client()
  device = api.devices(client)[0]
  memory = api.default_memory(device)
  data = (ctypes.c_char * 64)()
  for dims in OVERFLOW_DIMS:
    arr, p = int64s(dims)
    api.expect(
      "PJRT_Client_BufferFromHostBuffer",
      api.args(
        "PJRT_Client_BufferFromHostBuffer",
        client=client,
        data=ctypes.addressof(data),
        type=11,
        dims=p,
        num_dims=len(dims),
        device=device,
      ),
      INVALID_ARGUMENT,
    )
    api.expect(
      "PJRT_Client_CreateUninitializedBuffer",
      api.args(
        "PJRT_Client_CreateUninitializedBuffer",
        client=client,
        shape_dims=p,
        shape_num_dims=len(dims),
        shape_element_type=11,
        device=device,
      ),
      INVALID_ARGUMENT,
    )
    api.expect(
      "PJRT_Client_CreateViewOfDeviceBuffer",
      api.args(
        "PJRT_Client_CreateViewOfDeviceBuffer",
        client=client,
        device_buffer_ptr=ctypes.addressof(data),
        dims=p,
        num_dims=len(dims),
        element_type=11,
        device=device,
      ),
      INVALID_ARGUMENT,
    )
    api.expect(
      "PJRT_Client_CreateAliasBuffer",
      api.args(
        "PJRT_Client_CreateAliasBuffer",
        client=client,
        memory=memory,
        shape_dims=p,
        shape_num_dims=len(dims),
        shape_element_type=11,
      ),
      INVALID_ARGUMENT,
    )
    spec = (ctypes.c_uint64 * 5)(40, 0, p, len(dims), 11)
    api.expect(
      "PJRT_Client_CreateBuffersForAsyncHostToDevice",
      api.args(
        "PJRT_Client_CreateBuffersForAsyncHostToDevice",
        client=client,
        shape_specs=ctypes.addressof(spec),
        num_shape_specs=1,
        memory=memory,
      ),
      INVALID_ARGUMENT,
    )


# ---- Found by a hostile review (see docs/hostile_input.md): each
# case below crashed, hung or corrupted memory before its fix, unless noted.


def layout(type_code, array, count, struct_size=80, num_tiles=0):
  """A PJRT_Buffer_MemoryLayout: struct_size, extension_start, then the union (tiled:
  struct_size, extension_start, minor_to_major, its size, tile_dims, tile_dim_sizes,
  num_tiles; strides: struct_size, extension_start, byte_strides, their count), then type."""
  raw = (ctypes.c_uint64 * 10)()
  raw[0], raw[2], raw[4], raw[5], raw[8], raw[9] = (
    struct_size,
    56 if type_code == 0 else 32,
    array or 0,
    count,
    num_tiles,
    type_code,
  )
  return raw


@case
def host_layouts_are_checked(api: Api):
  client = api.client()
  buf = api.buffer(client, [1, 2, 3, 4], [4])
  dst = (ctypes.c_char * 64)()
  huge, huge_p = int64s([2**62])
  negative, negative_p = int64s([-4])
  for lay, fragment in [
    (layout(1, None, 1), "host_layout->strides.byte_strides is NULL"),  # SIGSEGV
    (layout(0, None, 1), "host_layout->tiled.minor_to_major is NULL"),  # SIGSEGV
    (layout(9999, huge_p, 1), "host_layout->type is 9999"),
    (layout(1, huge_p, 1), "reach past 2^63 bytes"),  # size wrapped; the copy SIGSEGVed
    (layout(1, negative_p, 1), "negative byte strides"),  # size query said 2^62 + 8
    (layout(0, huge_p, 2**40), "minor_to_major has 1099511627776 entries"),
  ]:  # read 8 TB
    for target, size in [(None, 0), (ctypes.addressof(dst), 64)]:
      api.expect(
        "PJRT_Buffer_ToHostBuffer",
        api.args(
          "PJRT_Buffer_ToHostBuffer",
          src=buf,
          host_layout=ctypes.addressof(lay),
          dst=target,
          dst_size=size,
        ),
        INVALID_ARGUMENT,
        fragment,
      )
  data = (ctypes.c_float * 4)()
  dims, dims_p = int64s([2, 2])
  api.expect(
    "PJRT_Client_BufferFromHostBuffer",
    api.args(
      "PJRT_Client_BufferFromHostBuffer",
      client=client,
      data=ctypes.addressof(data),
      type=11,
      dims=dims_p,
      num_dims=2,
      device=api.devices(client)[0],
      device_layout=ctypes.addressof(layout(0, None, 2)),
    ),
    INVALID_ARGUMENT,
    "device_layout->tiled.minor_to_major is NULL",
  )  # SIGSEGV


@case
def host_data_and_strides_are_checked(api: Api):
  client = api.client()
  device = api.devices(client)[0]
  data = (ctypes.c_char * 256)()
  middle = ctypes.addressof(data) + 128

  def from_host(dims, strides=None, address=middle, **extra):
    d, d_p = int64s(dims)
    s, s_p = int64s(strides or [])
    args = api.args(
      "PJRT_Client_BufferFromHostBuffer",
      client=client,
      data=address,
      type=11,
      dims=d_p,
      num_dims=len(dims),
      byte_strides=s_p if strides else None,
      num_byte_strides=len(strides or []),
      device=device,
      **extra,
    )
    args.keep = (d, s)
    return args

  # Was a memcpy from NULL (SIGSEGV).
  api.expect(
    "PJRT_Client_BufferFromHostBuffer",
    from_host([4], address=None),
    INVALID_ARGUMENT,
    "data is NULL but f32[4] has 16 bytes",
  )
  for strides in [[2**62], [2**63 - 1]]:  # the copy's addresses wrapped (SIGSEGV)
    api.expect(
      "PJRT_Client_BufferFromHostBuffer",
      from_host([4], strides),
      INVALID_ARGUMENT,
      "reach past 2^63 bytes",
    )
  api.expect(
    "PJRT_Client_BufferFromHostBuffer",
    from_host([3], [-(2**62)]),
    INVALID_ARGUMENT,
    "outside the address space",
  )
  # A count of 2^62 wrapped dims + num_dims to an empty range (a scalar was made); 2^28
  # read 2 GB past a one-element array (SIGSEGV).
  one, one_p = int64s([1])
  for count in [2**62, 2**28]:
    api.expect(
      "PJRT_Client_BufferFromHostBuffer",
      api.args(
        "PJRT_Client_BufferFromHostBuffer",
        client=client,
        data=middle,
        type=11,
        dims=one_p,
        num_dims=count,
        device=device,
      ),
      INVALID_ARGUMENT,
      f"num_dims is {count}, above the largest rank",
    )
  for semantics in [4, -1, 9999]:  # accepted before
    api.expect(
      "PJRT_Client_BufferFromHostBuffer",
      from_host([4], host_buffer_semantics=semantics),
      INVALID_ARGUMENT,
      "host_buffer_semantics is",
    )
  # Still accepted: an empty array needs no data, and strides of any sign that stay inside
  # the caller's memory (a reversed view, a broadcast).
  api.ok("PJRT_Client_BufferFromHostBuffer", from_host([0], address=None))
  floats = (ctypes.c_float * 8).from_address(middle - 16)
  floats[:] = [0, 1, 2, 3, 4, 5, 6, 7]  # middle holds 4.0
  for strides, expected in [([-4], [4, 3, 2, 1]), ([0], [4, 4, 4, 4])]:
    made = api.ok("PJRT_Client_BufferFromHostBuffer", from_host([4], strides))
    api.ok("PJRT_Event_Await", api.args("PJRT_Event_Await", event=made.done_with_host_buffer))
    back = (ctypes.c_float * 4)()
    copy = api.ok(
      "PJRT_Buffer_CopyRawToHost",
      api.args(
        "PJRT_Buffer_CopyRawToHost",
        buffer=made.buffer,
        dst=ctypes.addressof(back),
        offset=0,
        transfer_size=16,
      ),
    )
    api.ok("PJRT_Event_Await", api.args("PJRT_Event_Await", event=copy.event))
    assert list(back) == expected, (strides, list(back))
  # A raw copy of 0 bytes to NULL is accepted too (it memcpy'd to NULL: UBSan).
  buf = api.buffer(client, [1, 2], [2])
  copy = api.ok(
    "PJRT_Buffer_CopyRawToHost",
    api.args("PJRT_Buffer_CopyRawToHost", buffer=buf, dst=None, offset=0, transfer_size=0),
  )
  api.ok("PJRT_Event_Await", api.args("PJRT_Event_Await", event=copy.event))


@case
def pointers_that_cannot_be_handles(api: Api):
  # The handle check read 16 bytes below the pointer: address 0 for 0x10 (SIGSEGV).
  for bad in [1, 0x10, 0x1000, 0xFFF0, 0x10007]:
    api.expect(
      "PJRT_Buffer_Dimensions",
      api.args("PJRT_Buffer_Dimensions", buffer=bad),
      INVALID_ARGUMENT,
      "buffer is not a PJRT_Buffer",
    )
    api.expect(
      "PJRT_Client_Devices",
      api.args("PJRT_Client_Devices", client=bad),
      INVALID_ARGUMENT,
      "client is not a PJRT_Client",
    )
    api.expect(
      "PJRT_Error_GetCode",
      api.args("PJRT_Error_GetCode", error=bad),
      INVALID_ARGUMENT,
      "error is not a PJRT_Error",
    )
    message = api.args("PJRT_Error_Message", error=bad)
    api.call("PJRT_Error_Message", message)
    assert b"invalid PJRT_Error" in ctypes.string_at(message.message, message.message_size)
    api.call("PJRT_Error_Destroy", api.args("PJRT_Error_Destroy", error=bad))  # a no-op


def compile_program(api: Api, client, text=None, options=None):
  """A loaded executable of `text` (default: f32[4] -> x * 2) through PJRT_Client_Compile."""
  import jax
  import jax.numpy as jnp
  from jax._src.lib import xla_client

  if text is None:
    text = jax.jit(lambda x: x * 2).lower(jnp.ones(4, jnp.float32)).as_text()
  code = ctypes.create_string_buffer(text.encode())
  fmt = ctypes.create_string_buffer(b"mlir")
  program = (ctypes.c_uint64 * 6)(
    48, 0, ctypes.addressof(code), len(text.encode()), ctypes.addressof(fmt), 4
  )
  if options is None:
    options = xla_client.CompileOptions().SerializeAsString()
  opts = ctypes.create_string_buffer(options, max(1, len(options)))
  args = api.args(
    "PJRT_Client_Compile",
    client=client,
    program=ctypes.addressof(program),
    compile_options=ctypes.addressof(opts),
    compile_options_size=len(options),
  )
  args.keep = (code, fmt, program, opts)
  return args


def execute_args(api: Api, executable, rows, non_donatable=None):
  """PJRT_LoadedExecutable_Execute args: one argument list per row, outputs allocated."""
  lists = [(ctypes.c_void_p * max(1, len(row)))(*row) for row in rows]
  arg_lists = (ctypes.c_void_p * len(rows))(*[ctypes.addressof(x) for x in lists])
  outs = [(ctypes.c_void_p * 4)() for _ in rows]
  out_lists = (ctypes.c_void_p * len(rows))(*[ctypes.addressof(x) for x in outs])
  options = (ctypes.c_uint64 * 16)()
  options[0] = 128  # struct_size; then non_donatable_input_indices and their count
  indices, indices_p = int64s(non_donatable or [])
  options[7], options[8] = (indices_p, len(non_donatable)) if non_donatable else (0, 0)
  args = api.args(
    "PJRT_LoadedExecutable_Execute",
    executable=executable,
    options=ctypes.addressof(options),
    argument_lists=ctypes.addressof(arg_lists),
    num_devices=len(rows),
    num_args=len(rows[0]),
    output_lists=ctypes.addressof(out_lists),
  )
  args.keep = (lists, arg_lists, outs, out_lists, options, indices)
  return args


@case
def handles_outliving_their_client(api: Api):
  client = api.client()
  device = api.devices(client)[0]
  memory = api.default_memory(device)
  buf = api.buffer(client, [1, 2, 3, 4], [4])
  executable = api.ok("PJRT_Client_Compile", compile_program(api, client)).executable
  dims, dims_p = int64s([4])
  spec = (ctypes.c_uint64 * 5)(40, 0, dims_p, 1, 11)
  manager = api.ok(
    "PJRT_Client_CreateBuffersForAsyncHostToDevice",
    api.args(
      "PJRT_Client_CreateBuffersForAsyncHostToDevice",
      client=client,
      shape_specs=ctypes.addressof(spec),
      num_shape_specs=1,
      memory=memory,
    ),
  ).transfer_manager
  api.ok("PJRT_Client_Destroy", api.args("PJRT_Client_Destroy", client=client))
  gone = "belongs to a destroyed PJRT_Client"
  # Read the destroyed client's device table (heap-use-after-free under ASan).
  for name in [
    "PJRT_Buffer_Device",
    "PJRT_Buffer_Memory",
    "PJRT_Buffer_Dimensions",
    "PJRT_Buffer_Destroy",
  ]:
    api.expect(name, api.args(name, buffer=buf), INVALID_ARGUMENT, gone)
  dst = (ctypes.c_char * 16)()
  api.expect(
    "PJRT_Buffer_ToHostBuffer",
    api.args("PJRT_Buffer_ToHostBuffer", src=buf, dst=ctypes.addressof(dst), dst_size=16),
    INVALID_ARGUMENT,
    gone,
  )
  # Queued work on the destroyed client's worker: the call never returned.
  api.expect(
    "PJRT_LoadedExecutable_Execute",
    execute_args(api, executable, [[buf]]),
    INVALID_ARGUMENT,
    "executable " + gone,
  )
  api.expect(
    "PJRT_LoadedExecutable_Destroy",
    api.args("PJRT_LoadedExecutable_Destroy", executable=executable),
    INVALID_ARGUMENT,
    gone,
  )
  data = (ctypes.c_char * 16)()
  api.expect(
    "PJRT_AsyncHostToDeviceTransferManager_TransferData",
    api.args(
      "PJRT_AsyncHostToDeviceTransferManager_TransferData",
      transfer_manager=manager,
      buffer_index=0,
      data=ctypes.addressof(data),
      offset=0,
      transfer_size=16,
      is_last_transfer=True,
    ),
    INVALID_ARGUMENT,
    gone,
  )


@case
def refused_alias_fulfillments_complete_the_alias(api: Api):
  # The callback is consumed by the call, so a refusal that left the alias pending left it
  # pending forever: a program queued on it never ran. Also, the alias's own client was not
  # compared, so naming the buffer's client fulfilled another client's alias.
  client, other = api.client(), api.client()
  dims, dims_p = int64s([2])

  def alias():
    memory = ctypes.cast(api.default_memory(api.devices(client)[0]), ctypes.c_void_p)
    made = api.ok(
      "PJRT_Client_CreateAliasBuffer",
      api.args(
        "PJRT_Client_CreateAliasBuffer",
        client=client,
        memory=memory,
        shape_dims=dims_p,
        shape_num_dims=1,
        shape_element_type=11,
      ),
    )
    return made.alias_buffer, made.fulfill_alias_buffer_cb

  def refused_then_failed(fulfill_client, buffer, *fragments):
    aliased, callback = alias()
    message = api.expect(
      "PJRT_Client_FulfillAliasBuffer",
      api.args(
        "PJRT_Client_FulfillAliasBuffer",
        client=fulfill_client,
        buffer=buffer,
        status_code=0,
        fulfill_alias_buffer_cb=callback,
      ),
      INVALID_ARGUMENT,
      *fragments,
    )
    event = api.ok(
      "PJRT_Buffer_ReadyEvent", api.args("PJRT_Buffer_ReadyEvent", buffer=aliased)
    ).event
    assert api.ok("PJRT_Event_IsReady", api.args("PJRT_Event_IsReady", event=event)).is_ready
    assert (
      api.expect("PJRT_Event_Await", api.args("PJRT_Event_Await", event=event), INVALID_ARGUMENT)
      == message
    )

  foreign = "belongs to another PJRT_Client"
  refused_then_failed(client, api.buffer(other, [1, 2], [2]), foreign)
  refused_then_failed(other, api.buffer(other, [1, 2], [2]), foreign)
  refused_then_failed(client, api.buffer(client, [1, 2, 3, 4], [4]), "with a buffer of f32[4]")
  refused_then_failed(client, None, "OK status but no buffer")


@case
def objects_of_another_client(api: Api):
  # Each was accepted and left a buffer pointing into the other client's runtime, which a
  # later destroy of that client freed under it.
  client, other = api.client(), api.client()
  theirs = api.devices(other)[0]
  their_memory = api.default_memory(theirs)
  mine = api.buffer(client, [1, 2, 3, 4], [4])
  foreign = "belongs to another PJRT_Client"
  data = (ctypes.c_float * 4)()
  dims, dims_p = int64s([4])
  api.expect(
    "PJRT_Client_BufferFromHostBuffer",
    api.args(
      "PJRT_Client_BufferFromHostBuffer",
      client=client,
      data=ctypes.addressof(data),
      type=11,
      dims=dims_p,
      num_dims=1,
      device=theirs,
    ),
    INVALID_ARGUMENT,
    foreign,
  )
  api.expect(
    "PJRT_Client_CreateUninitializedBuffer",
    api.args(
      "PJRT_Client_CreateUninitializedBuffer",
      client=client,
      shape_dims=dims_p,
      shape_num_dims=1,
      shape_element_type=11,
      memory=their_memory,
    ),
    INVALID_ARGUMENT,
    foreign,
  )
  api.expect(
    "PJRT_Client_CreateAliasBuffer",
    api.args(
      "PJRT_Client_CreateAliasBuffer",
      client=client,
      memory=their_memory,
      shape_dims=dims_p,
      shape_num_dims=1,
      shape_element_type=11,
    ),
    INVALID_ARGUMENT,
    foreign,
  )
  api.expect(
    "PJRT_Buffer_CopyToDevice",
    api.args("PJRT_Buffer_CopyToDevice", buffer=mine, dst_device=theirs),
    INVALID_ARGUMENT,
    foreign,
  )
  api.expect(
    "PJRT_Buffer_CopyToMemory",
    api.args("PJRT_Buffer_CopyToMemory", buffer=mine, dst_memory=their_memory),
    INVALID_ARGUMENT,
    foreign,
  )
  executable = api.ok("PJRT_Client_Compile", compile_program(api, client)).executable
  theirs_buf = api.buffer(other, [1, 2, 3, 4], [4])
  api.expect(
    "PJRT_LoadedExecutable_Execute",
    execute_args(api, executable, [[theirs_buf]]),
    INVALID_ARGUMENT,
    "is on workshop:0 of another client",
  )


@case
def execute_arguments_are_checked(api: Api):
  client = api.client()
  devices = api.devices(client)
  executable = api.ok("PJRT_Client_Compile", compile_program(api, client)).executable
  data = (ctypes.c_float * 4)(1, 2, 3, 4)
  dims, dims_p = int64s([4])
  on_device_1 = api.ok(
    "PJRT_Client_BufferFromHostBuffer",
    api.args(
      "PJRT_Client_BufferFromHostBuffer",
      client=client,
      data=ctypes.addressof(data),
      type=11,
      dims=dims_p,
      num_dims=1,
      device=devices[1],
    ),
  ).buffer
  # Ran device 0's program on device 1's buffer; XLA:CPU refuses it.
  api.expect(
    "PJRT_LoadedExecutable_Execute",
    execute_args(api, executable, [[on_device_1]]),
    INVALID_ARGUMENT,
    "is on workshop:1; that row runs on workshop:0",
  )
  on_device_0 = api.buffer(client, [1, 2, 3, 4], [4])
  api.expect(
    "PJRT_LoadedExecutable_Execute",
    execute_args(api, executable, [[on_device_0]], non_donatable=[0, 0]),
    INVALID_ARGUMENT,
    "num_non_donatable_input_indices is 2, more than the 1",
  )
  for index in [-1, 1, 2**62]:  # silently ignored before
    api.expect(
      "PJRT_LoadedExecutable_Execute",
      execute_args(api, executable, [[on_device_0]], non_donatable=[index]),
      INVALID_ARGUMENT,
      f"non-donatable input index {index}",
    )
  api.ok(
    "PJRT_LoadedExecutable_Execute",
    execute_args(api, executable, [[on_device_0]], non_donatable=[0]),
  )


@case
def extension_handles_are_tagged(api: Api):
  def slots(type_code):
    ext = ctypes.cast(api.table[1], ctypes.POINTER(ctypes.c_uint64))
    while ext[1] != type_code:
      ext = ctypes.cast(ext[2], ctypes.POINTER(ctypes.c_uint64))
    return [
      ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(ext[i]) for i in range(3, ext[0] // 8)
    ]

  def call(fn, *words):
    args = (ctypes.c_uint64 * 16)(*words)
    return args, api.error(fn(ctypes.addressof(args)))

  client = api.client()
  buf = api.buffer(client, [1.0], [1])
  destroy, serialize, client_default, _, _, output_layouts, _ = slots(4)  # Layouts
  _, memory_kind = slots(6)  # MemoryDescriptions
  executable = api.ok(
    "PJRT_LoadedExecutable_GetExecutable",
    api.args(
      "PJRT_LoadedExecutable_GetExecutable",
      loaded_executable=api.ok("PJRT_Client_Compile", compile_program(api, client)).executable,
    ),
  ).executable
  args, err = call(output_layouts, 40, 0, executable)
  assert err is None, err
  owned = ctypes.cast(args[4], ctypes.POINTER(ctypes.c_void_p))[0]
  args, err = call(client_default, 56, 0, client, 11, 0, 0, 0)
  assert err is None, err
  default = args[6]
  # A buffer read as a layout: a rank in the billions, a serialize loop that never ended.
  assert "layout is not a PJRT_Layouts_MemoryLayout" in call(serialize, 56, 0, buf)[1][1]
  # delete of a pointer into the executable's vector: heap corruption.
  assert "belongs to its executable" in call(destroy, 24, 0, owned)[1][1]
  assert call(destroy, 24, 0, default)[1] is None
  assert "destroyed PJRT_Layouts_MemoryLayout" in call(destroy, 24, 0, default)[1][1]  # double free
  # A buffer read as a memory description: an out-of-range kind (SIGSEGV).
  for bad in [buf, 0x10]:
    assert "is not a PJRT_MemoryDescription" in call(memory_kind, 48, 0, bad)[1][1]


@case
def caller_error_codes_and_nested_sizes(api: Api):
  client = api.client()
  device = api.devices(client)[0]
  memory = api.default_memory(device)
  dims, dims_p = int64s([4])
  spec = (ctypes.c_uint64 * 5)(40, 0, dims_p, 1, 11)
  manager = api.ok(
    "PJRT_Client_CreateBuffersForAsyncHostToDevice",
    api.args(
      "PJRT_Client_CreateBuffersForAsyncHostToDevice",
      client=client,
      shape_specs=ctypes.addressof(spec),
      num_shape_specs=1,
      memory=memory,
    ),
  ).transfer_manager
  # Code 9999 became a PJRT_Error jaxlib cannot map to a status code.
  for code in [9999, -1, 17]:
    api.expect(
      "PJRT_AsyncHostToDeviceTransferManager_SetBufferError",
      api.args(
        "PJRT_AsyncHostToDeviceTransferManager_SetBufferError",
        transfer_manager=manager,
        buffer_index=0,
        error_code=code,
      ),
      INVALID_ARGUMENT,
      "error_code is",
      "not one of the values in [0, 16]",
    )
  alias = api.ok(
    "PJRT_Client_CreateAliasBuffer",
    api.args(
      "PJRT_Client_CreateAliasBuffer",
      client=client,
      memory=memory,
      shape_dims=dims_p,
      shape_num_dims=1,
      shape_element_type=11,
    ),
  )
  api.expect(
    "PJRT_Client_FulfillAliasBuffer",
    api.args(
      "PJRT_Client_FulfillAliasBuffer",
      client=client,
      status_code=9999,
      fulfill_alias_buffer_cb=alias.fulfill_alias_buffer_cb,
    ),
    INVALID_ARGUMENT,
    "status_code is 9999",
  )
  # Nested structs shorter than ours were read as if whole.
  short = (ctypes.c_uint64 * 5)(0, 0, dims_p, 1, 11)
  api.expect(
    "PJRT_Client_CreateBuffersForAsyncHostToDevice",
    api.args(
      "PJRT_Client_CreateBuffersForAsyncHostToDevice",
      client=client,
      shape_specs=ctypes.addressof(short),
      num_shape_specs=1,
      memory=memory,
    ),
    INVALID_ARGUMENT,
    "shape_specs[]->struct_size 0 is smaller",
  )
  name = ctypes.create_string_buffer(b"num_devices")
  # A named value's type outside the enum (read as an enum: undefined behaviour, UBSan).
  for bad_type in [99, 0xFFFFFFFF]:
    option = (ctypes.c_uint64 * 7)(56, 0, ctypes.addressof(name), 11, bad_type, 2, 1)
    api.expect(
      "PJRT_Client_Create",
      api.args("PJRT_Client_Create", create_options=ctypes.addressof(option), num_options=1),
      INVALID_ARGUMENT,
      f"create_options[0].type is {bad_type}",
    )
  # A bool holding 4 (UBSan: a load of an invalid bool) is true.
  store = ctypes.create_string_buffer(b"distributed_store")
  option = (ctypes.c_uint64 * 7)(56, 0, ctypes.addressof(store), 17, 4, 4, 1)
  created = api.ok(
    "PJRT_Client_Create",
    api.args("PJRT_Client_Create", create_options=ctypes.addressof(option), num_options=1),
  )
  api.ok("PJRT_Client_Destroy", api.args("PJRT_Client_Destroy", client=created.client))
  option = (ctypes.c_uint64 * 7)(0, 0, ctypes.addressof(name), 11, 1, 2, 1)
  api.expect(
    "PJRT_Client_Create",
    api.args("PJRT_Client_Create", create_options=ctypes.addressof(option), num_options=1),
    INVALID_ARGUMENT,
    "create_options[0].struct_size 0 is smaller",
  )


@case
def error_messages_are_valid_utf8(api: Api):
  # Messages quoting a caller's bytes came back with them raw; jaxlib decodes the message
  # as UTF-8 (api.error decodes strictly too).
  name = ctypes.create_string_buffer(b"\xff\xfe\x00x")
  option = (ctypes.c_uint64 * 7)(56, 0, ctypes.addressof(name), 4, 1, 2, 1)
  message = api.expect(
    "PJRT_Client_Create",
    api.args("PJRT_Client_Create", create_options=ctypes.addressof(option), num_options=1),
    INVALID_ARGUMENT,
    "unknown client create option",
  )
  assert "'\\xff\\xfe\\x00x'" in message, message
  client = api.client()
  args = compile_program(api, client)
  fmt = ctypes.create_string_buffer(b"ml\x00ir\xc3")
  program = ctypes.cast(args.program, ctypes.POINTER(ctypes.c_uint64))
  program[4], program[5] = ctypes.addressof(fmt), 6
  message = api.expect("PJRT_Client_Compile", args, INVALID_ARGUMENT)
  assert "\x00" not in message, message


def varint(value):
  value &= (1 << 64) - 1
  out = bytearray()
  while True:
    out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
    value >>= 7
    if not value:
      return bytes(out)


@case
def malformed_compile_options_are_errors(api: Api):
  # executable_build_options (field 3) { device_ordinal (field 1) }: jaxlib's
  # CompileOptions.ParseFromString CHECK-failed on a negative int (SIGABRT).
  client = api.client()
  for ordinal in [-2, 2**32 - 1, -(2**31)]:
    build = b"\x08" + varint(ordinal)
    options = b"\x1a" + varint(len(build)) + build
    api.expect(
      "PJRT_Client_Compile",
      compile_program(api, client, options=options),
      INVALID_ARGUMENT,
      f"device_ordinal {ordinal if ordinal < 0 else ordinal}",
    )
  build = b"\x08" + varint(-1)  # -1 means unset: compiles
  api.ok(
    "PJRT_Client_Compile",
    compile_program(api, client, options=b"\x1a" + varint(len(build)) + build),
  )
  from jax._src.lib import xla_client

  good = xla_client.CompileOptions().SerializeAsString()
  for cut in range(1, len(good), max(1, len(good) // 16)):  # truncated options
    err = api.error(
      api.call("PJRT_Client_Compile", compile_program(api, client, options=good[:cut]))
    )
    assert err is None or err[0] == INVALID_ARGUMENT, err


def main(argv):
  name = argv[1]
  plugin = None
  if "--plugin" in argv:
    plugin = argv[argv.index("--plugin") + 1]
  CASES[name](Api(plugin))
  print("ok", name)


if __name__ == "__main__":
  main(sys.argv)
