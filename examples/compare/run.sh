#!/usr/bin/env bash
# runtape's W1 and W5 on LangGraph (AsyncSqliteSaver), for the README's side-by-side figures.
# Not part of CI. Makes (once) a venv with the pinned requirements under target/, then runs
# langgraph_bench.py with any arguments given (--only w1|w5, --runs N, --rounds R, --reps N,
# --durability sync|async|exit, --json). Needs python3 (3.10+) and PyPI.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${RUNTAPE_COMPARE_VENV:-$here/../../target/compare-venv}"
stamp="$venv/.requirements"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! cmp -s "$here/requirements.txt" "$stamp"; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  cp "$here/requirements.txt" "$stamp"
fi
exec "$venv/bin/python" "$here/langgraph_bench.py" "$@"
