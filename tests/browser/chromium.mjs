// Shared by the scenarios in this folder (e2e.mjs, axe.mjs, time.mjs), which the browser tests
// of tests/it/serve run with node. What a scenario reads from its environment:
//   BASE_URL    the server's URL
//   RUNS        JSON: the run ids (and other names) the test prepared
//   SHOTS       directory for screenshots (written on every run, never committed)
//   CHROMIUM    the browser binary (/usr/bin/chromium)
//   RUNTAPE_BROWSER_MODULES  the folder tests/browser/install.sh installed into
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** `require` of the pinned modules (playwright-core, axe-core). */
export const modules = createRequire(join(process.env.RUNTAPE_BROWSER_MODULES, 'package.json'));
export const base = process.env.BASE_URL;
export const runs = JSON.parse(process.env.RUNS);
export const shots = process.env.SHOTS;

/** Fails the scenario with `what` unless `cond` holds. */
export function check(cond, what) {
  if (!cond) throw new Error(what);
}

/**
 * Runs `scenario(context)` in headless Chromium on a fresh profile. When it throws, prints
 * `NAME failed: MESSAGE` on stderr, screenshots the first page to SHOTS/FAILURE_SHOT and sets
 * exit code 1. Always closes the browser and removes the profile. True when it succeeded.
 */
export async function withChromium(name, failureShot, scenario) {
  const { chromium } = modules('playwright-core');
  const profile = mkdtempSync(join(tmpdir(), 'runtape-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM,
    headless: true,
    viewport: { width: 1360, height: 860 },
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
  });
  try {
    await scenario(context);
    return true;
  } catch (e) {
    console.error(name + ' failed: ' + (e && e.message ? e.message.split('\n')[0] : e));
    try {
      const p = context.pages()[0];
      if (p) await p.screenshot({ path: join(shots, failureShot) });
    } catch (_) { /* ignore */ }
    process.exitCode = 1;
    return false;
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}
