"""Readable source locations for error messages."""

from __future__ import annotations

from jaxlib.mlir import ir


def describe(loc: ir.Location) -> str:
  """Formats an MLIR location as "file:line:col (name)".

  JAX nests its name stack (e.g. "jit(f)/mul") and traceback frames as NameLocs around
  CallSite/FileLineCol locations, so the outermost name is the JAX op and the first file
  location is the innermost user frame. Either part may be missing; "unknown" if both are.
  """
  name = file_pos = None
  pending = [loc]
  while pending and file_pos is None:
    # The bindings downcast locations to their concrete class on access.
    loc = pending.pop(0)
    if isinstance(loc, ir.NameLoc):
      name = name or loc.name_str
      pending.append(loc.child_loc)
    elif isinstance(loc, ir.CallSiteLoc):
      pending.append(loc.callee)
    elif isinstance(loc, ir.FusedLoc):
      pending.extend(loc.locations)
    elif isinstance(loc, ir.FileLineColLoc):
      file_pos = f"{loc.filename}:{loc.start_line}:{loc.start_col}"
  if file_pos and name:
    return f"{file_pos} ({name})"
  return file_pos or name or "unknown"
