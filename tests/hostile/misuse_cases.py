"""The C API misuse corpus: each case drives the plugin wrongly on purpose and asserts the
plugin answers with an error (never a crash). Run one case per process:

  python tests/hostile/misuse_cases.py CASE [--plugin PATH]

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
  api.expect("PJRT_Buffer_Destroy", api.args("PJRT_Buffer_Destroy", buffer=buf),
             INVALID_ARGUMENT, "PJRT_Buffer_Destroy: buffer is a destroyed PJRT_Buffer")


@case
def buffer_use_after_destroy(api: Api):
  client = api.client()
  buf = api.buffer(client, [1, 2], [2])
  api.ok("PJRT_Buffer_Destroy", api.args("PJRT_Buffer_Destroy", buffer=buf))
  for name in ["PJRT_Buffer_Dimensions", "PJRT_Buffer_ElementType", "PJRT_Buffer_IsDeleted",
               "PJRT_Buffer_ReadyEvent", "PJRT_Buffer_Delete", "PJRT_Buffer_Device"]:
    api.expect(name, api.args(name, buffer=buf), INVALID_ARGUMENT, "destroyed PJRT_Buffer")
  api.expect("PJRT_Buffer_ToHostBuffer", api.args("PJRT_Buffer_ToHostBuffer", src=buf),
             INVALID_ARGUMENT, "src is a destroyed PJRT_Buffer")


@case
def event_double_destroy_and_use(api: Api):
  client = api.client()
  buf = api.buffer(client, [1.0], [1])
  ev = api.ok("PJRT_Buffer_ReadyEvent", api.args("PJRT_Buffer_ReadyEvent", buffer=buf)).event
  api.ok("PJRT_Event_Destroy", api.args("PJRT_Event_Destroy", event=ev))
  for name in ["PJRT_Event_Destroy", "PJRT_Event_IsReady", "PJRT_Event_Await",
               "PJRT_Event_Error"]:
    api.expect(name, api.args(name, event=ev), INVALID_ARGUMENT, "destroyed PJRT_Event")


@case
def error_double_destroy_and_use(api: Api):
  err = api.raw("PJRT_Client_Devices", None)  # some error
  api.call("PJRT_Error_Destroy", api.args("PJRT_Error_Destroy", error=err))
  api.call("PJRT_Error_Destroy", api.args("PJRT_Error_Destroy", error=err))  # no-op
  msg = api.args("PJRT_Error_Message", error=err)
  api.call("PJRT_Error_Message", msg)
  assert b"invalid PJRT_Error" in ctypes.string_at(msg.message, msg.message_size)
  api.expect("PJRT_Error_GetCode", api.args("PJRT_Error_GetCode", error=err), INVALID_ARGUMENT,
             "destroyed PJRT_Error")


@case
def handle_of_another_type(api: Api):
  client = api.client()
  buf = api.buffer(client, [1.0], [1])
  ev = api.ok("PJRT_Buffer_ReadyEvent", api.args("PJRT_Buffer_ReadyEvent", buffer=buf)).event
  api.expect("PJRT_Buffer_Dimensions", api.args("PJRT_Buffer_Dimensions", buffer=ev),
             INVALID_ARGUMENT, "buffer is not a PJRT_Buffer")
  api.expect("PJRT_Event_IsReady", api.args("PJRT_Event_IsReady", event=buf),
             INVALID_ARGUMENT, "event is not a PJRT_Event")
  api.expect("PJRT_Client_Devices", api.args("PJRT_Client_Devices", client=buf),
             INVALID_ARGUMENT, "client is not a PJRT_Client")
  device = api.devices(client)[0]
  api.expect("PJRT_Memory_Kind", api.args("PJRT_Memory_Kind", memory=device),
             INVALID_ARGUMENT, "memory is not a PJRT_Memory")


@case
def client_and_devices_after_client_destroy(api: Api):
  client = api.client()
  device = api.devices(client)[0]
  api.ok("PJRT_Client_Destroy", api.args("PJRT_Client_Destroy", client=client))
  api.expect("PJRT_Client_Destroy", api.args("PJRT_Client_Destroy", client=client),
             INVALID_ARGUMENT, "destroyed PJRT_Client")
  api.expect("PJRT_Client_Devices", api.args("PJRT_Client_Devices", client=client),
             INVALID_ARGUMENT, "destroyed PJRT_Client")
  api.expect("PJRT_Device_LocalHardwareId", api.args("PJRT_Device_LocalHardwareId",
                                                     device=device),
             INVALID_ARGUMENT, "destroyed PJRT_Device")


@case
def client_topology_is_not_destroyable(api: Api):
  client = api.client()
  topo = api.ok("PJRT_Client_TopologyDescription",
                api.args("PJRT_Client_TopologyDescription", client=client)).topology
  api.expect("PJRT_TopologyDescription_Destroy",
             api.args("PJRT_TopologyDescription_Destroy", topology=topo), INVALID_ARGUMENT,
             "belongs to its client")
  api.ok("PJRT_TopologyDescription_PlatformName",
         api.args("PJRT_TopologyDescription_PlatformName", topology=topo))


@case
def execute_context_double_destroy(api: Api):
  ctx = api.ok("PJRT_ExecuteContext_Create", api.args("PJRT_ExecuteContext_Create")).context
  api.ok("PJRT_ExecuteContext_Destroy", api.args("PJRT_ExecuteContext_Destroy", context=ctx))
  api.expect("PJRT_ExecuteContext_Destroy", api.args("PJRT_ExecuteContext_Destroy",
                                                     context=ctx),
             INVALID_ARGUMENT, "destroyed PJRT_ExecuteContext")


# ---- Bad (pointer, size) pairs and strings.

@case
def null_dims_with_a_count(api: Api):
  client = api.client()
  data = (ctypes.c_float * 4)()
  api.expect("PJRT_Client_BufferFromHostBuffer",
             api.args("PJRT_Client_BufferFromHostBuffer", client=client,
                      data=ctypes.addressof(data), type=11, dims=None, num_dims=2,
                      device=api.devices(client)[0]),
             INVALID_ARGUMENT, "dims is NULL but num_dims is 2")
  dims, dims_p = int64s([4])
  api.expect("PJRT_Client_BufferFromHostBuffer",
             api.args("PJRT_Client_BufferFromHostBuffer", client=client,
                      data=ctypes.addressof(data), type=11, dims=dims_p, num_dims=1,
                      byte_strides=None, num_byte_strides=1, device=api.devices(client)[0]),
             INVALID_ARGUMENT, "byte_strides is NULL")


@case
def create_option_with_null_name(api: Api):
  nv_cls = type("NV", (ctypes.Structure,), {"_fields_": [
      ("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
      ("name", ctypes.c_void_p), ("name_size", ctypes.c_size_t), ("type", ctypes.c_int),
      ("value", ctypes.c_void_p), ("value_size", ctypes.c_size_t)]})
  # Was std::string(nullptr, 11): std::logic_error through extern "C", process aborted.
  option = nv_cls(struct_size=56, name=None, name_size=11, type=1, value=4, value_size=1)
  api.expect("PJRT_Client_Create", api.args("PJRT_Client_Create",
                                            create_options=ctypes.addressof(option),
                                            num_options=1),
             INVALID_ARGUMENT, "create_options[0].name is NULL")
  name = ctypes.create_string_buffer(b"num_devices")
  option = nv_cls(struct_size=56, name=ctypes.addressof(name), name_size=11, type=0,
                  value=None, value_size=3)
  api.expect("PJRT_Client_Create", api.args("PJRT_Client_Create",
                                            create_options=ctypes.addressof(option),
                                            num_options=1),
             INVALID_ARGUMENT, "string_value is NULL")
  api.expect("PJRT_Client_Create", api.args("PJRT_Client_Create", create_options=None,
                                            num_options=3),
             INVALID_ARGUMENT, "create_options is NULL")


@case
def compile_with_bad_program(api: Api):
  client = api.client()
  api.expect("PJRT_Client_Compile", api.args("PJRT_Client_Compile", client=client,
                                             program=None),
             INVALID_ARGUMENT, "program is NULL")
  # PJRT_Program: struct_size, extension_start, code, code_size, format, format_size.
  raw = (ctypes.c_uint64 * 6)(48, 0, 0, 100, 0, 4)
  api.expect("PJRT_Client_Compile", api.args("PJRT_Client_Compile", client=client,
                                             program=ctypes.addressof(raw)),
             INVALID_ARGUMENT, "program->code is NULL but program->code_size is 100")
  empty = (ctypes.c_uint64 * 6)(48, 0, 0, 0, 0, 0)
  api.expect("PJRT_Client_Compile", api.args("PJRT_Client_Compile", client=client,
                                             program=ctypes.addressof(empty),
                                             compile_options=None, compile_options_size=9),
             INVALID_ARGUMENT, "compile_options is NULL")


@case
def deserialize_garbage(api: Api):
  client = api.client()
  api.expect("PJRT_Executable_DeserializeAndLoad",
             api.args("PJRT_Executable_DeserializeAndLoad", client=client,
                      serialized_executable=None, serialized_executable_size=10),
             INVALID_ARGUMENT, "serialized_executable is NULL")
  for blob in [b"", b"WSEX", b"\x04\0\0\0\0\0\0\0WSEX\x02\0\0\0", b"\xff" * 64,
               b"\x04\0\0\0\0\0\0\0WSEX\x01\0\0\0" + b"\0" * 40]:
    data = ctypes.create_string_buffer(blob, max(1, len(blob)))
    api.expect("PJRT_Executable_DeserializeAndLoad",
               api.args("PJRT_Executable_DeserializeAndLoad", client=client,
                        serialized_executable=ctypes.addressof(data),
                        serialized_executable_size=len(blob)),
               INVALID_ARGUMENT)


@case
def execute_with_null_lists(api: Api):
  api.expect("PJRT_LoadedExecutable_Execute", api.args("PJRT_LoadedExecutable_Execute"),
             INVALID_ARGUMENT, "executable is NULL")


@case
def raw_copy_out_of_range(api: Api):
  client = api.client()
  buf = api.buffer(client, [1, 2, 3, 4], [4])
  dst = (ctypes.c_char * 16)()
  for offset, size in [(-1, 4), (0, 17), (15, 2), (2**62, 2**62)]:
    api.expect("PJRT_Buffer_CopyRawToHost",
               api.args("PJRT_Buffer_CopyRawToHost", buffer=buf, dst=ctypes.addressof(dst),
                        offset=offset, transfer_size=size), INVALID_ARGUMENT)


@case
def to_host_with_small_destination(api: Api):
  client = api.client()
  buf = api.buffer(client, [1, 2, 3, 4], [4])
  dst = (ctypes.c_char * 16)()
  api.expect("PJRT_Buffer_ToHostBuffer",
             api.args("PJRT_Buffer_ToHostBuffer", src=buf, dst=ctypes.addressof(dst),
                      dst_size=15), INVALID_ARGUMENT, "dst_size 15")


@case
def device_lookup_out_of_range(api: Api):
  client = api.client()
  for i in [-1, 4, 2**31 - 1]:
    api.expect("PJRT_Client_LookupDevice", api.args("PJRT_Client_LookupDevice", client=client,
                                                    id=i), INVALID_ARGUMENT)


@case
def fulfill_alias_twice(api: Api):
  client = api.client()
  dims, dims_p = int64s([2])
  memory = ctypes.cast(api.ok("PJRT_Device_DefaultMemory", api.args(
      "PJRT_Device_DefaultMemory", device=api.devices(client)[0])).memory, ctypes.c_void_p)
  a = api.ok("PJRT_Client_CreateAliasBuffer", api.args(
      "PJRT_Client_CreateAliasBuffer", client=client, memory=memory, shape_dims=dims_p,
      shape_num_dims=1, shape_element_type=11))
  src = api.buffer(client, [1, 2], [2])
  fulfill = dict(client=client, buffer=src, status_code=0,
                 fulfill_alias_buffer_cb=a.fulfill_alias_buffer_cb)
  api.ok("PJRT_Client_FulfillAliasBuffer", api.args("PJRT_Client_FulfillAliasBuffer", **fulfill))
  api.expect("PJRT_Client_FulfillAliasBuffer",
             api.args("PJRT_Client_FulfillAliasBuffer", **fulfill), INVALID_ARGUMENT,
             "destroyed PJRT_FulfillAliasBufferCallback")


# ---- Shapes whose sizes overflow (also in test_overflow.py against XLA's CPU plugin).

OVERFLOW_DIMS = [[2**32, 2**32, 16], [2**61 + 1, 8], [4] * 100, [2**62, 2**62, 0],
                 [-1, 4], [2**63 - 1, 2]]


@case
def overflow_dims_everywhere(api: Api):
  client = api.client()
  device = api.devices(client)[0]
  memory = api.ok("PJRT_Device_DefaultMemory", api.args("PJRT_Device_DefaultMemory",
                                                        device=device)).memory
  data = (ctypes.c_char * 64)()
  for dims in OVERFLOW_DIMS:
    arr, p = int64s(dims)
    api.expect("PJRT_Client_BufferFromHostBuffer",
               api.args("PJRT_Client_BufferFromHostBuffer", client=client,
                        data=ctypes.addressof(data), type=11, dims=p, num_dims=len(dims),
                        device=device), INVALID_ARGUMENT)
    api.expect("PJRT_Client_CreateUninitializedBuffer",
               api.args("PJRT_Client_CreateUninitializedBuffer", client=client, shape_dims=p,
                        shape_num_dims=len(dims), shape_element_type=11, device=device),
               INVALID_ARGUMENT)
    api.expect("PJRT_Client_CreateViewOfDeviceBuffer",
               api.args("PJRT_Client_CreateViewOfDeviceBuffer", client=client,
                        device_buffer_ptr=ctypes.addressof(data), dims=p, num_dims=len(dims),
                        element_type=11, device=device), INVALID_ARGUMENT)
    api.expect("PJRT_Client_CreateAliasBuffer",
               api.args("PJRT_Client_CreateAliasBuffer", client=client, memory=memory,
                        shape_dims=p, shape_num_dims=len(dims), shape_element_type=11),
               INVALID_ARGUMENT)
    spec = (ctypes.c_uint64 * 5)(40, 0, p, len(dims), 11)
    api.expect("PJRT_Client_CreateBuffersForAsyncHostToDevice",
               api.args("PJRT_Client_CreateBuffersForAsyncHostToDevice", client=client,
                        shape_specs=ctypes.addressof(spec), num_shape_specs=1, memory=memory),
               INVALID_ARGUMENT)


def main(argv):
  name = argv[1]
  plugin = None
  if "--plugin" in argv:
    plugin = argv[argv.index("--plugin") + 1]
  CASES[name](Api(plugin))
  print("ok", name)


if __name__ == "__main__":
  main(sys.argv)
