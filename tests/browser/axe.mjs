// Every view of the runtape page checked with axe-core in Debian's Chromium, driven by
// playwright-core. Run by tests/it/serve/accessibility.rs, which starts `runtape serve` and
// prepares the runs:
//   BASE_URL    the server's URL
//   RUNS        JSON: { done, fork, waiting, sleeping, saga } run ids, experiment: a report's id
//   SHOTS       directory for screenshots (written on every run, never committed)
//   CHROMIUM    the browser binary (/usr/bin/chromium)
//   RUNTAPE_BROWSER_MODULES  the folder tests/browser/install.sh installed into
// axe runs with its default rules (WCAG 2.0, 2.1 and 2.2 A and AA, and best practices) on each
// view as a person sees it, the page's CSP kept (axe is evaluated through the DevTools
// protocol, not as a page script). Prints one JSON line: per view, the violations by impact.
// Exits 1 listing every serious or critical violation (rule, impact, help, the elements).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { base, modules, runs, shots, withChromium } from './chromium.mjs';

const axeSource = readFileSync(modules.resolve('axe-core/axe.min.js'), 'utf8');
const results = { views: {} };
const serious = [];

// Runs axe on the page as it is now and records what it found under `name`.
async function audit(page, name) {
  await page.evaluate(axeSource);
  const found = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations', 'incomplete'] });
    const brief = (v) => ({
      id: v.id, impact: v.impact, help: v.help,
      nodes: v.nodes.map((n) => ({ target: n.target.join(' '), why: n.failureSummary || '' })),
    });
    // The statechart's labels are SVG text, whose background axe cannot find: each is
    // measured here against the fill of the box it sits in (WCAG's relative luminance).
    const lum = (css) => {
      const [r, g, b] = css.match(/\d+(\.\d+)?/g).slice(0, 3).map((v) => {
        const c = Number(v) / 255;
        return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
      });
      return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const svgText = [...document.querySelectorAll('svg .state')].map((g) => {
      const fg = lum(getComputedStyle(g.querySelector('text')).fill);
      const bg = lum(getComputedStyle(g.querySelector('rect')).fill);
      return { target: g.id, ratio: (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05) };
    });
    return {
      svg_low_contrast: svgText.filter((t) => !(t.ratio >= 4.5)).map((t) => t.target + ' ' + t.ratio.toFixed(2)),
      svg_texts: svgText.length,
      violations: r.violations.map(brief),
      // Contrast axe could not decide (text over an image, a gradient): listed, not failed.
      contrast_unsure: r.incomplete.filter((v) => v.id === 'color-contrast').flatMap((v) => v.nodes.map((n) => n.target.join(' '))),
    };
  });
  const byImpact = {};
  for (const v of found.violations) byImpact[v.impact] = (byImpact[v.impact] || 0) + v.nodes.length;
  results.views[name] = { rules: found.violations.map((v) => v.id + ' (' + v.impact + ', ' + v.nodes.length + ')'), by_impact: byImpact, contrast_unsure: found.contrast_unsure };
  results.views[name].svg_texts = found.svg_texts;
  if (found.svg_low_contrast.length) {
    serious.push(name + ': statechart labels below 4.5:1: ' + found.svg_low_contrast.join(', '));
  }
  for (const v of found.violations) {
    if (v.impact === 'serious' || v.impact === 'critical') {
      serious.push(name + ': ' + v.id + ' (' + v.impact + ') ' + v.help + '\n' + v.nodes.map((n) => '    ' + n.target + ': ' + n.why.replace(/\n/g, ' ')).join('\n'));
    }
  }
  await page.screenshot({ path: join(shots, 'axe-' + name + '.png') });
}

const ran = await withChromium('accessibility scenario', 'axe-failure.png', async (context) => {
  const page = context.pages()[0] || await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(String(e)));

  await page.goto(base + '#/');
  await page.waitForSelector(`tr[data-run="${runs.done}"]`);
  await page.click('details.panel summary');
  await audit(page, 'runs');

  await page.goto(base + '#/stats');
  await page.waitForSelector('#stats-spend table');
  await audit(page, 'stats');

  await page.goto(base + '#/schedules');
  await page.waitForSelector('tr[data-schedule]');
  await audit(page, 'schedules');

  // A run: timeline, statechart, a model request in the inspector, the fork form open.
  await page.goto(base + '#/run/' + runs.done + '/2');
  await page.waitForSelector('#request');
  await page.waitForSelector('#statechart svg');
  await page.click('#act-fork');
  await page.waitForSelector('#fork-go');
  await audit(page, 'run');

  // A message after an action, and the step after a keyboard move in the timeline.
  await page.click('#act-verify');
  await page.waitForSelector('#flash:not([hidden])');
  await page.focus('#timeline');
  await page.keyboard.press('ArrowDown');
  await page.waitForSelector('#tool-result, #reply');
  await audit(page, 'run-message');

  await page.goto(base + '#/run/' + runs.waiting);
  await page.waitForSelector('.waiting[data-call] .approve');
  await audit(page, 'approval');

  await page.goto(base + '#/run/' + runs.sleeping);
  await page.waitForSelector('#run-wakes');
  await audit(page, 'sleeping');

  await page.goto(base + '#/run/' + runs.saga + '/10');
  await page.waitForSelector('.row.saga[data-seq="10"]');
  await audit(page, 'saga');

  await page.goto(base + '#/diff/' + runs.done + '/' + runs.fork);
  await page.waitForSelector('#compare-steps .panel h2');
  await audit(page, 'compare');

  await page.goto(base + '#/experiments');
  await page.waitForSelector('#experiments table');
  await audit(page, 'experiments');

  await page.goto(base + '#/experiments/' + encodeURIComponent(runs.experiment));
  await page.waitForSelector('#experiment section.panel table');
  await audit(page, 'experiment');

  if (runs.login) {
    const login = await context.newPage();
    await login.goto(runs.login + '#/');
    await login.waitForSelector('#login:not([hidden])');
    await audit(login, 'login');
    await login.close();
  }
  if (problems.length) throw new Error('page errors: ' + problems.join(' | '));
});
console.log(JSON.stringify(results));
if (serious.length) {
  console.error(serious.length + ' serious or critical axe violation(s):\n' + serious.join('\n'));
  process.exitCode = 1;
}
if (!ran) process.exitCode = 1;
