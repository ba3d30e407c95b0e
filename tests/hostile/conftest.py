"""Shared by the hostile suite: every case runs in a child process, so a crash (a signal)
or a hang is a test failure with the case named, not a lost pytest session.

WORKSHOP_HOSTILE_PLUGIN=path runs the C API cases against another build of the plugin;
tests/run_sanitizers.py uses it to run this suite on an ASan+UBSan build.
"""

from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def child_env(**extra):
  env = dict(
    os.environ,
    PYTHONPATH=os.pathsep.join([REPO, HERE] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
  )
  env.update(extra)
  return env


def run_child(args, timeout=120, **env):
  """Runs `python args...` in tests/hostile; returns the CompletedProcess."""
  return subprocess.run(
    [sys.executable, *args],
    cwd=HERE,
    env=child_env(**env),
    capture_output=True,
    text=True,
    timeout=timeout,
  )


def plugin_args():
  path = os.environ.get("WORKSHOP_HOSTILE_PLUGIN")
  return ["--plugin", path] if path else []
