#!/usr/bin/env bash
# Installs what tests/it/serve/browser.rs drives Chromium with: playwright-core, the version pinned
# in package-lock.json beside this file, into $RUNTAPE_BROWSER_TESTS (default
# target/browser-tests), plus the test script. Playwright's own browser download is never used:
# the tests launch Debian's /usr/bin/chromium (`.ci/run` installs it). Idempotent: does nothing
# when that folder already holds exactly this lock file's install.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dest="${RUNTAPE_BROWSER_TESTS:-$root/target/browser-tests}"
mkdir -p "$dest"
if cmp -s "$here/package-lock.json" "$dest/package-lock.json" \
    && [ -f "$dest/node_modules/playwright-core/package.json" ]; then
  echo "browser test modules already installed in $dest"
  exit 0
fi
command -v npm >/dev/null || { echo "npm is not installed: install Node.js (apt-get install nodejs npm)" >&2; exit 1; }
cp "$here/package.json" "$here/package-lock.json" "$dest/"
(cd "$dest" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --ignore-scripts)
echo "browser test modules installed in $dest"
