"""The workshop plugin's compiler: StableHLO -> Plan (see docs/design.md)."""

from .compile import compile_program
from .plan import Executable, Instr, Plan

__all__ = ["Executable", "Instr", "Plan", "compile_program"]
