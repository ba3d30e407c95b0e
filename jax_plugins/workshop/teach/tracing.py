"""What JAX asks of the plugin: a trace of every PJRT C API call.

    import jax_plugins.workshop as workshop

    with workshop.trace() as t:
      jax.jit(f)(x).block_until_ready()
    print(t.table())          # function, key arguments, result, duration, thread
    t.timeline()              # matplotlib: one lane per thread

The plugin records the calls itself (plugin_src/capi/trace.h: every slot of its PJRT_Api
table goes through one wrapper) into a ring buffer; this module switches recording on and
off and reads the buffer through the C functions the plugin exports (ctypes). Setting
WORKSHOP_TRACE=1 before the plugin is loaded records from the start and also prints each
call to stderr as it returns.

Handles (buffers, events, executables) are shown as `buffer#3`: numbered per kind in
order of first appearance within the trace, so a trace of the same program reads the same
every time.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import dataclasses
import json
import re
import threading
from collections.abc import Iterator

_HANDLE = re.compile(r"([a-z_]+)@(0x[0-9a-f]+|\(nil\))")
_lock = threading.Lock()
_depth = 0
_enabled_before = False


@dataclasses.dataclass(frozen=True)
class Call:
  """One C API call.

  Attributes:
    seq: position among all recorded calls.
    function: e.g. "PJRT_Client_Compile".
    args: key arguments (and, for failed calls, the error message), "key=value" words.
    code: PJRT_Error_Code of the result; 0 is success.
    start_ms: start time relative to the start of the trace.
    duration_ms: time spent in the plugin.
    thread: name of the calling thread (our device workers are "workshop-devN").
    tid: the calling thread's native id; `on_main_thread` compares it with Python's main
      thread, where JAX runs user code.
  """

  seq: int
  function: str
  args: str
  code: int
  start_ms: float
  duration_ms: float
  thread: str
  tid: int

  @property
  def on_main_thread(self) -> bool:
    return self.tid == threading.main_thread().native_id

  @property
  def name(self) -> str:
    """The function without its "PJRT_" prefix."""
    return self.function.removeprefix("PJRT_")


class Trace:
  """The calls recorded inside one `trace()` block (filled when the block exits)."""

  def __init__(self):
    self.calls: list[Call] = []
    self.dropped = 0  # Calls overwritten in the ring buffer before they could be read.

  def functions(self) -> list[str]:
    """The called functions in order, without the PJRT_ prefix."""
    return [c.name for c in self.calls]

  def counts(self) -> collections.Counter:
    return collections.Counter(self.functions())

  def select(self, *names: str) -> list[Call]:
    """The calls of the functions `names` (without the PJRT_ prefix)."""
    return [c for c in self.calls if c.name in names]

  def table(self, timing: bool = False, width: int = 100) -> str:
    """One line per call: function, key arguments, result (and duration, thread)."""
    lines = []
    for c in self.calls:
      result = "OK" if c.code == 0 else f"error {c.code}"
      line = f"{c.name:<44} {result:<8} {c.args}"
      if timing:
        line = f"{c.start_ms:9.3f} ms {c.duration_ms:8.3f} ms  {c.thread:<15} " + line
      lines.append(line if len(line) <= width else line[: width - 3] + "...")
    return "\n".join(lines)

  def timeline(self, ax=None, min_ms: float = 0.0, labels: int = 6):
    """Draws the calls on a time axis, one lane per thread that made a call; returns the Axes.

    Calls shorter than `min_ms` are drawn `min_ms` wide so they stay visible. The functions
    of the `labels` longest calls get a colour of their own, named in a legend below the
    axis's right (labels on the bars would overlap); every other call is grey.
    """
    import matplotlib.pyplot as plt

    threads = list(dict.fromkeys(c.thread for c in self.calls))
    if ax is None:
      _, ax = plt.subplots(figsize=(12, 1.2 + 0.5 * len(threads)))
    longest = sorted(self.calls, key=lambda c: c.duration_ms, reverse=True)
    named = list(dict.fromkeys(c.name for c in longest))[:labels]
    colors = plt.get_cmap("tab10")
    for c in self.calls:
      color = colors(named.index(c.name)) if c.name in named else "0.7"
      ax.broken_barh(
        [(c.start_ms, max(c.duration_ms, min_ms))],
        (threads.index(c.thread) - 0.4, 0.8),
        color=color,
      )
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors(i)) for i in range(len(named))]
    ax.legend(
      handles + [plt.Rectangle((0, 0), 1, 1, color="0.7")],
      named + ["other calls"],
      loc="upper left",
      bbox_to_anchor=(1.01, 1.0),
      fontsize=8,
      frameon=False,
    )
    ax.set_yticks(range(len(threads)), threads)
    ax.set_xlabel("ms since the start of the trace")
    ax.set_ylim(-0.6, len(threads) - 0.4)
    return ax


@contextlib.contextmanager
def trace() -> Iterator[Trace]:
  """Records the plugin's C API calls made inside the block; nests."""
  global _depth, _enabled_before
  lib = _library()
  result = Trace()
  with _lock:
    if _depth == 0:
      _enabled_before = bool(lib.WorkshopTraceEnabled())
      lib.WorkshopTraceSetEnabled(1)
    _depth += 1
    since = lib.WorkshopTraceNextSequence()
  try:
    yield result
  finally:
    with _lock:
      _depth -= 1
      if _depth == 0 and not _enabled_before:
        lib.WorkshopTraceSetEnabled(0)
      raw = _dump(lib, since)
    result.calls, result.dropped = _parse(raw, since)


def _library() -> ctypes.CDLL:
  """The plugin library, as loaded by jaxlib (dlopen of one path returns one instance)."""
  from .. import preload_openblas, library_path

  preload_openblas()
  lib = ctypes.CDLL(library_path())
  lib.WorkshopTraceEnabled.restype = ctypes.c_int
  lib.WorkshopTraceSetEnabled.argtypes = [ctypes.c_int]
  lib.WorkshopTraceNextSequence.restype = ctypes.c_uint64
  lib.WorkshopTraceDump.argtypes = [ctypes.c_uint64]
  lib.WorkshopTraceDump.restype = ctypes.c_void_p
  lib.WorkshopTraceFree.argtypes = [ctypes.c_void_p]
  return lib


def _dump(lib: ctypes.CDLL, since: int) -> str:
  pointer = lib.WorkshopTraceDump(since)
  if not pointer:
    return ""
  try:
    return ctypes.string_at(pointer).decode("utf-8", "replace")
  finally:
    lib.WorkshopTraceFree(pointer)


def _parse(raw: str, since: int) -> tuple[list[Call], int]:
  """Calls from the plugin's JSON lines, handles renumbered; and how many were dropped."""
  entries = [json.loads(line) for line in raw.splitlines() if line]
  if not entries:
    return [], 0
  t0 = entries[0]["start_ns"]
  numbers: dict[str, dict[str, int]] = collections.defaultdict(dict)

  def renumber(match: re.Match) -> str:
    kind, address = match.groups()
    ids = numbers[kind]
    return f"{kind}#{ids.setdefault(address, len(ids) + 1)}"

  calls = []
  for e in entries:
    calls.append(
      Call(
        e["seq"],
        e["function"],
        _HANDLE.sub(renumber, e["args"]),
        e["code"],
        (e["start_ns"] - t0) / 1e6,
        e["duration_ns"] / 1e6,
        e["thread"],
        e["tid"],
      )
    )
    if e["function"].endswith("_Destroy"):
      # The address may be reused by a new object, which must get a new number.
      for kind, address in _HANDLE.findall(e["args"]):
        numbers[kind].pop(address, None)
  return calls, entries[0]["seq"] - since
