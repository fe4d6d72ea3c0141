#!/usr/bin/env bash
# Installs the MCP reference servers the tests run against (the versions pinned in
# package-lock.json beside this file) into $RUNTAPE_MCP_SERVERS, default target/mcp-servers.
# Idempotent: does nothing when that folder already holds exactly this lock file's install.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dest="${RUNTAPE_MCP_SERVERS:-$root/target/mcp-servers}"
mkdir -p "$dest"
if cmp -s "$here/package-lock.json" "$dest/package-lock.json" \
    && [ -f "$dest/node_modules/@modelcontextprotocol/server-everything/package.json" ] \
    && [ -f "$dest/node_modules/@modelcontextprotocol/server-filesystem/package.json" ]; then
  echo "MCP test servers already installed in $dest"
  exit 0
fi
command -v npm >/dev/null || { echo "npm is not installed: install Node.js (apt-get install nodejs npm)" >&2; exit 1; }
cp "$here/package.json" "$here/package-lock.json" "$dest/"
(cd "$dest" && npm ci --no-audit --no-fund --ignore-scripts)
echo "MCP test servers installed in $dest"
