#!/usr/bin/env bash
# Installs the MCP reference servers the tests run against (the versions pinned in
# package-lock.json beside this file) into $RUNTAPE_MCP_SERVERS, default target/mcp-servers.
# Idempotent: does nothing when that folder already holds exactly this lock file's install.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
. "$root/tests/extras/npm_locked.sh"
npm_locked "MCP test servers" "$here" "${RUNTAPE_MCP_SERVERS:-$root/target/mcp-servers}" \
  @modelcontextprotocol/server-everything @modelcontextprotocol/server-filesystem
