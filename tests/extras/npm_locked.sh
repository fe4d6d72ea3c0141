# Sourced by tests/browser/install.sh and tests/mcp_servers/install.sh (not run on its own).
#
# npm_locked WHAT HERE DEST PACKAGE...: installs the npm packages pinned by HERE/package-lock.json
# into DEST with `npm ci`. Idempotent: does nothing when DEST already holds exactly this lock
# file's install (the same package-lock.json, and every PACKAGE under node_modules). Variables
# npm should see (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD) are exported by the caller.
npm_locked() {
  local what="$1" here="$2" dest="$3" installed=1 package
  shift 3
  mkdir -p "$dest"
  cmp -s "$here/package-lock.json" "$dest/package-lock.json" || installed=0
  for package in "$@"; do
    [ -f "$dest/node_modules/$package/package.json" ] || installed=0
  done
  if [ "$installed" = 1 ]; then
    echo "$what already installed in $dest"
    return 0
  fi
  command -v npm >/dev/null || { echo "npm is not installed: install Node.js (apt-get install nodejs npm)" >&2; exit 1; }
  cp "$here/package.json" "$here/package-lock.json" "$dest/"
  (cd "$dest" && npm ci --no-audit --no-fund --ignore-scripts)
  echo "$what installed in $dest"
}
