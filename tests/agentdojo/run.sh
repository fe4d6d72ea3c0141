#!/usr/bin/env bash
# Measures guarded tools on AgentDojo (agentdojo 0.1.35 from PyPI; install it with
# tests/extras/install.sh agentdojo): builds runtape, then runs every (user task x injection
# task) pair of the banking and slack suites with the policy on and off and prints the report.
#
#   bash tests/agentdojo/run.sh [--suite banking] [--pairs N] [--users N] [--injections N] [--json FILE]
#                               [--provider FILE]   (a real model instead of the scripted ones)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/target/agentdojo-venv"
[ -x "$venv/bin/python" ] || { echo "no AgentDojo venv: run tests/extras/install.sh agentdojo" >&2; exit 1; }
if [ -z "${RUNTAPE_BIN:-}" ]; then
  (cd "$root" && cargo build --quiet --bin runtape)
  RUNTAPE_BIN="$root/target/debug/runtape"
fi
exec "$venv/bin/python" "$here/bench.py" --runtape "$RUNTAPE_BIN" "$@"
