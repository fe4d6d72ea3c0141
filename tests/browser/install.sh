#!/usr/bin/env bash
# Installs what the browser tests (tests/it/serve/browser.rs, accessibility.rs,
# time_in_the_browser.rs) drive and check Chromium with: playwright-core and axe-core, the
# versions pinned in package-lock.json beside this file, into $RUNTAPE_BROWSER_TESTS (default
# target/browser-tests), plus the test script. Playwright's own browser download is never used:
# the tests launch Debian's /usr/bin/chromium (`.ci/run` installs it). Idempotent: does nothing
# when that folder already holds exactly this lock file's install.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
. "$root/tests/extras/npm_locked.sh"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
npm_locked "browser test modules" "$here" "${RUNTAPE_BROWSER_TESTS:-$root/target/browser-tests}" \
  playwright-core axe-core
