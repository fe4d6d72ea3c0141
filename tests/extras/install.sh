#!/usr/bin/env bash
# Installs the extras that the ignored test tiers need, idempotently and at pinned versions:
#
#   tests/extras/install.sh [all|postgres|browser|mcp|python|curl|agentdojo]...   (default: all)
#
#   postgres  Debian's PostgreSQL server binaries (initdb, pg_ctl; the tests start their own
#             server on a free loopback port)
#   browser   Debian's Chromium, playwright-core and axe-core (pinned in
#             tests/browser/package-lock.json)
#   mcp       the MCP reference servers on Node.js (pinned in tests/mcp_servers/package-lock.json)
#   python    python3, which the scripted MCP test servers run on
#   curl      curl, which the README's `runtape serve` examples use
#   agentdojo AgentDojo (PyPI, pinned in tests/agentdojo/requirements.txt) in a venv under
#             target/agentdojo-venv, for the guard::agentdojo tier (about 3 minutes, ~290 MB)
#
# Then `cargo test -- --include-ignored` runs every tier; each ignored test names in its reason
# the one command that provides what it needs. Debian packages need root (apt-get); the npm
# packages go under target/ (see the scripts in tests/mcp_servers and tests/browser).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tests="$(cd "$here/.." && pwd)"

apt_updated=0
apt() {
  if ! command -v apt-get >/dev/null; then
    echo "tests/extras/install.sh: no apt-get here; install the Debian packages $* by hand" >&2
    exit 1
  fi
  if [ "$apt_updated" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

need_node() {
  command -v npm >/dev/null || apt nodejs npm
}

postgres() {
  if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    echo "postgres: server binaries present"
  else
    apt postgresql
    echo "postgres: installed"
  fi
}

browser() {
  if command -v chromium >/dev/null; then
    echo "browser: chromium present"
  else
    apt chromium
    echo "browser: chromium installed"
  fi
  need_node
  bash "$tests/browser/install.sh"
}

mcp() {
  need_node
  bash "$tests/mcp_servers/install.sh"
}

python() {
  if command -v python3 >/dev/null; then
    echo "python: python3 present"
  else
    apt python3
    echo "python: installed"
  fi
}

curl_() {
  if command -v curl >/dev/null; then
    echo "curl: present"
  else
    apt curl
    echo "curl: installed"
  fi
}

agentdojo() {
  python
  python3 -c 'import ensurepip' 2>/dev/null || apt python3-venv
  bash "$tests/agentdojo/install.sh"
}

[ $# -eq 0 ] && set -- all
for extra in "$@"; do
  case "$extra" in
    all) postgres; browser; mcp; python; curl_; agentdojo ;;
    postgres) postgres ;;
    browser) browser ;;
    mcp) mcp ;;
    python) python ;;
    curl) curl_ ;;
    agentdojo) agentdojo ;;
    *) echo "tests/extras/install.sh: unknown extra \`$extra\` (all, postgres, browser, mcp, python, curl, agentdojo)" >&2; exit 2 ;;
  esac
done
