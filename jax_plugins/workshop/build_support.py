"""Build helpers shared by this repository's setup.py and the plugin projects that
``python -m jax_plugins.workshop.new_device`` writes (it copies this file into each one,
so both build the same way): where pjrt_c_api.h comes from, the StableHLO versions of
the installed jaxlib, and the PJRT_Api table's slots as the header lists them.

Imports nothing from the package (setup.py loads it by path, before anything is built).
"""

from __future__ import annotations

import os
import re


def needs_recompile_under(root: str):
  """A `needs_recompile(obj, src)` for pybind11's ParallelCompile: whether `obj` is older
  than `src` or than any header it included, so a rebuild compiles only what changed.

  The compiler writes the headers each object included into `obj`'s depfile (-MMD). A
  header that no longer exists outside `root` (the project) is one of a deleted build
  environment (pip's isolated build of pjrt_c_api.h): the same version is installed, so
  it does not force a rebuild; one of the project's own that vanished does.
  """
  root = os.path.abspath(root)

  def needs_recompile(obj: str, src: str) -> bool:
    depfile = os.path.splitext(obj)[0] + ".d"
    if not os.path.exists(depfile):
      return True
    built = os.path.getmtime(obj)
    with open(depfile) as f:
      text = f.read().replace("\\\n", " ")
    for dependency in text.partition(":")[2].split():
      if os.path.exists(dependency):
        if os.path.getmtime(dependency) > built:
          return True
      elif os.path.abspath(dependency).startswith(root + os.sep):
        return True
    return False

  return needs_recompile


def pjrt_header_dir() -> str:
  """The include directory of the xla-cpu-pjrt wheel, which ships pjrt_c_api.h.

  The header is never copied into a repository: the build requirement (pyproject.toml)
  installs the wheel, and the plugin is compiled against the API version it declares.
  """
  import xla_plugins.xla_cpu_pjrt as xla_cpu_pjrt

  return os.path.join(os.path.dirname(xla_cpu_pjrt.__file__), "include")


def stablehlo_versions() -> tuple[str, str]:
  """(current, minimum) StableHLO versions of the installed jaxlib, as "1,17,0" strings
  (C initializer lists for the plugin's stablehlo_*_version attributes)."""
  from jaxlib.mlir.dialects import stablehlo

  def as_macro(version: str) -> str:
    return ",".join(version.split("."))

  return as_macro(stablehlo.get_current_version()), as_macro(stablehlo.get_minimum_version())


def api_slots(header: str) -> list[str]:
  """The function slots of `struct PJRT_Api` in `header` (pjrt_c_api.h), in order, without
  the PJRT_ prefix: ["Error_Destroy", "Error_Message", ...].

  Raises:
    ValueError: the header has no PJRT_Api struct or it lists no slot.
  """
  with open(header) as f:
    text = f.read()
  body = re.search(r"typedef struct PJRT_Api \{(.*?)\} PJRT_Api;", text, re.S)
  slots = re.findall(r"_PJRT_API_STRUCT_FIELD\(PJRT_(\w+)\);", body[1]) if body else []
  if not slots:
    raise ValueError(f"{header}: no PJRT_Api table with _PJRT_API_STRUCT_FIELD slots")
  return slots


def write_api_slots(header_dir: str, out: str) -> None:
  """Writes `out`, an X-macro list `PJRT_API_SLOT(Error_Destroy)` ... of every PJRT_Api
  slot of the header in `header_dir`, in the table's order; only when it changes (its
  timestamp decides what recompiles)."""
  slots = api_slots(os.path.join(header_dir, "pjrt_c_api.h"))
  text = ("// Generated from pjrt_c_api.h by build_support.write_api_slots: every slot of\n"
          "// struct PJRT_Api, in the header's order. Do not edit.\n"
          + "".join(f"PJRT_API_SLOT({slot})\n" for slot in slots))
  os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
  if not os.path.exists(out) or open(out).read() != text:
    with open(out, "w") as f:
      f.write(text)
