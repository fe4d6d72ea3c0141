#!/usr/bin/env bash
# Runs runtape's W1 and W5 workloads on LangGraph (examples/compare/langgraph_bench.py) in a
# virtual environment holding the pinned requirements, made once under
# ${RUNTAPE_COMPARE_VENV:-~/.cache/runtape-compare/venv}. Needs python3 with venv and access to
# PyPI the first time. Arguments go to the script, e.g.:
#
#   bash examples/compare/run.sh --only w1 --reps 3                  # light setup (the default)
#   bash examples/compare/run.sh --only w1 --reps 3 --setup heavy    # MessagesState + async saver
#   bash examples/compare/run.sh --only w5 --runs 1000 --reps 3
#
# Compare with `runtape bench --only w1` and `runtape bench --only w5 --runs 1000` in the same
# sitting (see the performance chapter of the guide).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${RUNTAPE_COMPARE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/runtape-compare/venv}"
stamp="$venv/.requirements"
if ! cmp -s "$here/requirements.txt" "$stamp" 2>/dev/null; then
    echo "  making $venv with $here/requirements.txt …" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    cp "$here/requirements.txt" "$stamp"
fi
exec "$venv/bin/python" "$here/langgraph_bench.py" "$@"
