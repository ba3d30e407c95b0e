"""The workshop plugin's compiler: StableHLO -> Plan (see docs/architecture.md)."""

from .compile import compile_program
from .options import parse as parse_options
from .plan import Executable, Instr, Plan

__all__ = ["Executable", "Instr", "Plan", "compile_program", "parse_options"]
