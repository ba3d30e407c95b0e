"""A notebook run in JupyterLab in a real browser, as an attendee runs it.

nbval (the README's test command) runs the notebooks through a kernel alone; this test runs
one through JupyterLab's own UI in headless Chromium: it starts `jupyter lab` from this
environment (a free port, a random token, the server's root a copy of the notebook inside
the repository's build/ folder, so the notebook finds the checkout and nothing in
notebooks/ is saved over), opens notebook 05 (the quickest to run that draws a figure:
its C API timeline, about 20 s of cells), clicks Run > Run All Cells, waits until every
code cell has run and the kernel is idle, then checks what the page shows: no cell with an
error output, the figure rendered as an image the browser decoded, and the tqdm bars if
the notebook has any. The saved copy is checked too (an execution count for every code
cell, no error output).

Chromium is Debian's `chromium` package (`apt-get install -y chromium`; .ci/run installs
it), driven by `playwright` (in the `workshop` extra) through `executable_path`, so no
browser download is needed. The test skips, saying what is missing, without either. On a
failure it keeps a screenshot and the page's text, and the message gives their paths.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "05_what_jax_asks.ipynb"
RUN_TIMEOUT_S = 240  # the notebook's cells take about 20 s on a quiet 2-core machine
ARTIFACTS = Path(os.environ.get("WORKSHOP_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts"))
TQDM_BAR = re.compile(r"\d+%\|")


def _chromium() -> str | None:
  """The Chromium binary: $CHROMIUM, or Debian's (the real binary, not the wrapper script,
  whose flags and environment checks are for desktop use)."""
  for candidate in (os.environ.get("CHROMIUM"), "/usr/lib/chromium/chromium",
                    shutil.which("chromium"), shutil.which("chromium-browser")):
    if candidate and os.access(candidate, os.X_OK):
      return candidate
  return None


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _lab_settings(directory: Path) -> None:
  """User settings for the test's JupyterLab: every cell attached to the page (JupyterLab
  4 attaches only the cells in view by default, so the others could not be checked), and
  no news or update check (no network here)."""
  settings = {
      "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
      "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
          "fetchNews": "false", "checkForUpdates": False},
  }
  for name, value in settings.items():
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def _wait_for_server(url: str, proc: subprocess.Popen, log: Path, timeout: float = 90) -> None:
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if proc.poll() is not None:
      raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
    try:
      with urllib.request.urlopen(url, timeout=5) as response:
        if response.status == 200:
          return
    except OSError:
      time.sleep(0.5)
  raise RuntimeError(f"jupyter lab did not answer {url} within {timeout} s:\n"
                     f"{log.read_text()[-3000:]}")


@pytest.fixture
def jupyterlab():
  """A JupyterLab server on a free port whose root is a fresh copy of the notebook; yields
  (base url, token, the copy's path). The server (and its kernels) stop after the test."""
  pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (pip install -e '.[workshop]')")
  (ROOT / "build").mkdir(exist_ok=True)
  work = Path(tempfile.mkdtemp(prefix="jupyterlab-browser-", dir=ROOT / "build"))
  shutil.copy(ROOT / "notebooks" / NOTEBOOK, work / NOTEBOOK)
  _lab_settings(work / ".settings")
  port, token = _free_port(), secrets.token_hex(16)
  log = work / ".server.log"
  # The kernel spec ipykernel installs starts `python` from PATH: this interpreter's.
  path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
  env = dict(os.environ, PATH=path, JUPYTERLAB_SETTINGS_DIR=str(work / ".settings"),
             JUPYTERLAB_WORKSPACES_DIR=str(work / ".workspaces"),
             JUPYTER_CONFIG_DIR=str(work / ".jupyter"),
             JUPYTER_RUNTIME_DIR=str(work / ".runtime"))
  with open(log, "w") as out:
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}",
         "--ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
         "--ServerApp.port_retries=0", "--allow-root", "--LabApp.news_url=",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
  base = f"http://127.0.0.1:{port}"
  try:
    _wait_for_server(f"{base}/api/status?token={token}", proc, log)
    yield base, token, work / NOTEBOOK
  finally:
    proc.terminate()
    try:
      proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
      proc.kill()
      proc.wait()
    shutil.rmtree(work, ignore_errors=True)


def _keep_artifacts(page, reason: str) -> str:
  """Saves a screenshot and the page's text; returns the message naming them."""
  ARTIFACTS.mkdir(parents=True, exist_ok=True)
  stem = ARTIFACTS / f"jupyterlab-{Path(NOTEBOOK).stem}"
  try:
    page.screenshot(path=f"{stem}.png", full_page=True)
    Path(f"{stem}.txt").write_text(page.inner_text("body"))
  except Exception as e:  # noqa: BLE001  (the failure itself matters more)
    return f"{reason} (saving the screenshot failed: {e})"
  return f"{reason}; screenshot {stem}.png, page text {stem}.txt"


def _all_ran(path: Path) -> bool:
  """Whether every code cell of the notebook file has an execution count."""
  try:
    cells = json.loads(path.read_text())["cells"]
  except (OSError, ValueError):
    return False
  return all(c["execution_count"] for c in cells if c["cell_type"] == "code")


def test_notebook_runs_in_jupyterlab_in_chromium(jupyterlab):
  chromium = _chromium()
  if chromium is None:
    pytest.skip("no Chromium: apt-get install -y chromium (or set CHROMIUM to its binary)")
  sync_api = pytest.importorskip("playwright.sync_api",
                                 reason="playwright is not installed (pip install -e '.[workshop]')")
  base, token, copy = jupyterlab
  stored = json.loads((ROOT / "notebooks" / NOTEBOOK).read_text())
  code_cells = sum(c["cell_type"] == "code" for c in stored["cells"])
  has_tqdm = any(TQDM_BAR.search("".join(o.get("text", "")))
                 for c in stored["cells"] for o in c.get("outputs", []))
  started = time.monotonic()
  with sync_api.sync_playwright() as p:
    # --no-sandbox: Chromium's sandbox refuses to run as root (CI and this machine).
    browser = p.chromium.launch(executable_path=chromium, headless=True,
                                args=["--no-sandbox", "--disable-dev-shm-usage"])
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
      page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}", timeout=120_000)
      # Loaded: every code cell is on the page, and the kernel has started (the status bar
      # says "Python 3 (ipykernel) | Idle"; before, "No Kernel | Initializing").
      page.wait_for_function(
          "n => document.querySelectorAll('.jp-Notebook .jp-CodeCell').length === n",
          arg=code_cells, timeout=120_000, polling=500)
      page.locator("#jp-main-statusbar", has_text=re.compile(r"\(ipykernel\) \| Idle")).wait_for(
          timeout=120_000)
      page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
      page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()
      # Done: nothing queued or running ("[*]:"), the kernel idle, and a cell has run. A
      # cell that raises stops Run All; the cells after it keep an empty prompt.
      page.wait_for_function(
          """n => {
               const prompts = [...document.querySelectorAll(
                   '.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')];
               return prompts.length === n && !prompts.some(p => p.textContent.includes('*'))
                 && prompts.some(p => /\\[\\d+\\]/.test(p.textContent))
                 && document.querySelector(
                        ".jp-Notebook-ExecutionIndicator[data-status='idle']") !== null;
             }""", arg=code_cells, timeout=RUN_TIMEOUT_S * 1000, polling=500)
      ran_s = time.monotonic() - started
      # JupyterLab renders an error output as text (its traceback) like stderr; IPython's
      # tracebacks say "Traceback (most recent call last)".
      error_texts = [t[:400] for t in page.locator(
          ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
      ).all_inner_texts() if "Traceback (most recent call last)" in t]
      assert not error_texts, _keep_artifacts(page, f"cells show errors: {error_texts}")
      not_run = page.evaluate(
          """() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')]
                     .map((p, i) => /\\[\\d+\\]/.test(p.textContent) ? -1 : i)
                     .filter(i => i >= 0)""")
      assert not not_run, _keep_artifacts(page, f"code cells {not_run} did not run")
      images = page.locator(".jp-OutputArea-output img, .jp-OutputArea-output svg")
      decoded = page.evaluate(
          """() => [...document.querySelectorAll('.jp-OutputArea-output img')]
                     .filter(img => img.complete && img.naturalWidth > 0).length
                   + [...document.querySelectorAll('.jp-OutputArea-output svg')]
                     .filter(svg => svg.getBoundingClientRect().width > 0).length""")
      assert images.count() and decoded, _keep_artifacts(page, "no figure was rendered")
      if has_tqdm:
        assert TQDM_BAR.search(page.inner_text(".jp-Notebook")), _keep_artifacts(
            page, "the notebook's tqdm bars are not shown")
      # Save (the copy: notebooks/ is outside the server's root), through the File menu.
      page.locator(".lm-MenuBar-item", has_text=re.compile(r"^File$")).click()
      page.locator(".lm-Menu-item[data-command='docmanager:save']").click()
      deadline = time.monotonic() + 30
      while not _all_ran(copy) and time.monotonic() < deadline:
        time.sleep(0.5)
    except (AssertionError, sync_api.Error) as e:
      if isinstance(e, AssertionError) and "screenshot" in str(e):
        raise
      raise AssertionError(_keep_artifacts(page, f"{type(e).__name__}: {e}")) from e
    finally:
      browser.close()
  assert _all_ran(copy), "the saved copy has a code cell without an execution count"
  cells = [c for c in json.loads(copy.read_text())["cells"] if c["cell_type"] == "code"]
  errors = [f"{o['ename']}: {o['evalue']}" for c in cells for o in c["outputs"]
            if o["output_type"] == "error"]
  assert not errors, f"the saved copy has error outputs: {errors}"
  assert any(k.startswith("image/") for c in cells for o in c["outputs"]
             for k in o.get("data", {})), "the saved copy has no figure"
  print(f"{NOTEBOOK}: {len(cells)} code cells run in JupyterLab in {ran_s:.0f} s")
