#!/usr/bin/env bash
# Makes the venv the AgentDojo harness runs in, target/agentdojo-venv, with the packages pinned
# in requirements.txt (agentdojo 0.1.35 from PyPI and its dependency tree). Idempotent: a venv
# that already has the pinned agentdojo is left as it is. A fresh install takes about 3 minutes
# and ~290 MB (agentdojo pulls the OpenAI, Anthropic, Cohere, Google and LangChain clients).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/target/agentdojo-venv"
pinned="$(grep -E '^agentdojo==' "$here/requirements.txt" | cut -d= -f3)"
if [ -x "$venv/bin/python" ] &&
  [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("agentdojo"))' 2>/dev/null)" = "$pinned" ]; then
  echo "agentdojo: $pinned present in $venv"
  exit 0
fi
command -v python3 >/dev/null || { echo "agentdojo: needs python3 (tests/extras/install.sh python)" >&2; exit 1; }
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
echo "agentdojo: $pinned installed in $venv"
