#!/usr/bin/env bash
# Lint and format checks: ruff (lint + format, configured in pyproject.toml's [tool.ruff])
# over the Python, clang-format (.clang-format, .clang-format-ignore) over the C++.
#
#   tools/lint.sh          check only: exits non-zero on a lint finding or a file that is
#                          not formatted (prints the findings and the diffs)
#   tools/lint.sh --fix    apply ruff's safe fixes, ruff format and clang-format -i, then check
#
# The tools are the versions tools/lint-requirements.txt pins, from PATH:
#   python3 -m venv /tmp/lint && /tmp/lint/bin/pip install -r tools/lint-requirements.txt
#   PATH=/tmp/lint/bin:$PATH tools/lint.sh
# notebooks/ is excluded (jupytext pairs and exercise fragments), as are generated files.
set -euo pipefail
cd "$(dirname "$0")/.."

fix=0
case "${1-}" in
  "") ;;
  --fix) fix=1 ;;
  -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 [--fix]" >&2; exit 2 ;;
esac

# Each pinned tool must be on PATH at its pinned version.
pinned() { sed -n "s/^$1==//p" tools/lint-requirements.txt; }
for tool in ruff clang-format; do
  want=$(pinned "$tool")
  if ! command -v "$tool" >/dev/null; then
    echo "$tool not found: pip install -r tools/lint-requirements.txt (see $0)" >&2; exit 2
  fi
  have=$("$tool" --version | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1)
  if [ "$have" != "$want" ]; then
    echo "$tool $have on PATH, tools/lint-requirements.txt pins $want" >&2; exit 2
  fi
done

# The C++: every tracked .cc and .h outside notebooks/ (the template's sources included);
# .clang-format-ignore names the exceptions, and clang-format skips those itself.
mapfile -t cxx < <(git ls-files -- '*.cc' '*.h' ':!:notebooks/**')

if [ "$fix" = 1 ]; then
  ruff check --fix --quiet . || true   # what it cannot fix is reported below
  ruff format --quiet .
  [ "${#cxx[@]}" -eq 0 ] || clang-format -i "${cxx[@]}"
fi

status=0
step() { printf '=== %s\n' "$1"; }
step "ruff check"
ruff check . || status=1
step "ruff format --check"
ruff format --check --diff . || status=1
step "clang-format (${#cxx[@]} files)"
if [ "${#cxx[@]}" -gt 0 ] && ! clang-format --dry-run --Werror "${cxx[@]}"; then
  status=1
fi
if [ "$status" != 0 ]; then
  echo "lint: findings above; tools/lint.sh --fix applies the formatters and ruff's safe fixes" >&2
fi
exit "$status"
