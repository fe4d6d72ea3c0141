// End-to-end scenarios of the runtape page in Debian's Chromium, driven by playwright-core.
// Run by tests/it/serve/browser.rs, which starts `runtape serve` and prepares the runs:
//   BASE_URL    the server's URL
//   RUNS        JSON: { done, waiting, big, saga, failed } run ids, team_b: the runs tagged team=b
//   SHOTS       directory for screenshots (written on every run, never committed)
//   CHROMIUM    the browser binary (/usr/bin/chromium)
//   RUNTAPE_BROWSER_MODULES  the folder tests/browser/install.sh installed into
// Prints one JSON line of measurements on success; exits 1 with a message on failure.
import { base, check, runs, shots, withChromium } from './chromium.mjs';
import { join } from 'node:path';

const results = {};

await withChromium('browser scenario', 'failure.png', async (context) => {
  const page = context.pages()[0] || await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); });
  // Everything the page loads comes from the server: no other host is ever asked.
  const foreign = [];
  page.on('request', (r) => { if (!r.url().startsWith(base)) foreign.push(r.url()); });

  // 1. The runs list.
  await page.goto(base + '#/');
  await page.waitForSelector(`tr[data-run="${runs.done}"]`);
  await page.waitForSelector(`tr[data-run="${runs.waiting}"] [data-status="awaiting_input"]`);
  await page.screenshot({ path: join(shots, '1-runs.png') });

  // 1b. Filter the list on the server: by tag, then failed runs, whose reason shows.
  const listed = () => page.evaluate(() => [...document.querySelectorAll('tr[data-run]')].map((r) => r.dataset.run).sort().join(','));
  await page.fill('#filter-tag', 'team=b');
  await page.waitForFunction((want) => [...document.querySelectorAll('tr[data-run]')].map((r) => r.dataset.run).sort().join(',') === want,
    [...runs.team_b].sort().join(','));
  check(!(await page.isVisible(`tr[data-run="${runs.done}"]`)), 'an untagged run is filtered out');
  await page.fill('#filter-tag', '');
  await page.selectOption('#filter-status', 'failed');
  // The failed runs are the two whose model refused the goal and the compensated saga run.
  await page.waitForFunction(([failed, saga]) => document.querySelector(`tr[data-run="${failed}"] .reason`) !== null
    && document.querySelector(`tr[data-run="${saga}"]`) !== null
    && document.querySelectorAll('tr[data-run]').length === 3, [runs.failed, runs.saga]);
  const reason = await page.textContent(`tr[data-run="${runs.failed}"] .reason`);
  check(reason.includes('this goal is refused'), 'the list shows why the run failed: ' + reason);
  check((await listed()).split(',').every((id) => id !== runs.done), 'only failed runs are listed');
  await page.screenshot({ path: join(shots, '1b-filtered.png') });
  await page.click(`tr[data-run="${runs.failed}"] a.mono`);
  await page.waitForSelector('#run-reason');
  const head = await page.textContent('#run-reason');
  check(head.startsWith('Failed: bad_request') && head.includes('this goal is refused'), 'the header shows why the run failed: ' + head);
  check((await page.textContent('#run-tags')).includes('team=b'), 'the header shows the run\'s tags');

  // 2. Open a run and step through its timeline.
  await page.goto(base + '#/run/' + runs.done);
  await page.waitForSelector('.row[data-seq="1"]');
  await page.click('.row[data-seq="1"]');
  await page.waitForFunction(() => document.querySelector('#inspector h2')?.textContent === 'Step 1 of 8');
  await page.focus('#timeline');
  for (let i = 0; i < 3; i++) await page.keyboard.press('ArrowDown');
  await page.waitForFunction(() => document.querySelector('#inspector h2')?.textContent === 'Step 4 of 8');
  await page.click('#next-step');
  await page.waitForFunction(() => document.querySelector('#inspector h2')?.textContent === 'Step 5 of 8');
  check(await page.isVisible('.row.selected[data-seq="5"]'), 'step 5 is highlighted in the timeline');
  check((await page.textContent('#step-edge')).length > 0, 'the inspector names the edge');

  // 3. Inspect a model request (step 2 calls the model).
  await page.click('.row[data-seq="2"]');
  await page.waitForSelector('#request');
  const request = await page.textContent('#request');
  check(request.includes('Model request: script/scripted'), 'the request names its provider and model: ' + request.slice(0, 200));
  check(request.includes('runtape keeps every step'), 'the user message is shown');
  check(await page.isVisible('#statechart svg #state-Generating.current'), 'the statechart highlights the state of the step');
  await page.screenshot({ path: join(shots, '2-run-request.png') });
  // The reply of step 3 and the tool result of step 4, readably.
  await page.click('.row[data-seq="3"]');
  await page.waitForSelector('#reply');
  check((await page.textContent('#reply')).includes('count_words'), 'the reply shows the tool calls it asked for');
  await page.click('.row[data-seq="4"]');
  await page.waitForSelector('#tool-result');

  // 4. Approve a waiting call and watch the run complete live.
  await page.goto(base + '#/run/' + runs.waiting);
  await page.waitForSelector(`.waiting[data-call] .approve`);
  await page.screenshot({ path: join(shots, '3-waiting.png') });
  await page.click('.waiting .approve');
  await page.waitForSelector('.run-head [data-status="completed"]', { timeout: 30000 });
  await page.waitForSelector('.row[data-seq="8"]', { timeout: 30000 });
  check(!(await page.isVisible('.waiting')), 'nothing waits any more');
  await page.screenshot({ path: join(shots, '4-approved.png') });

  // 5. Fork from a step with an edit and compare the branches.
  await page.goto(base + '#/run/' + runs.done + '/1');
  await page.waitForFunction(() => document.querySelector('#inspector h2')?.textContent === 'Step 1 of 8');
  await page.click('#act-fork');
  await page.selectOption('#fork-kind', 'user');
  await page.fill('#fork-value', "How many words are in 'a b c'?");
  await page.click('#fork-go');
  await page.waitForFunction((done) => location.hash.startsWith('#/diff/' + done + '/'), runs.done);
  await page.waitForFunction(() => /first differ at step 2/.test(document.querySelector('#diff-summary')?.textContent || ''));
  await page.waitForSelector('#compare-steps .panel h2');
  const fork = await page.evaluate(() => location.hash.split('/')[3]);
  check(/^[0-9a-z]{16}$/.test(fork), 'the fork has an id: ' + fork);
  check(await page.isVisible('#side-0 .row.differs[data-seq="2"]'), 'the first differing step is marked');
  // The view follows the fork as it runs, until both branches have ended.
  await page.waitForFunction(() => document.querySelectorAll('.compare h2 [data-status="completed"]').length === 2, null, { timeout: 30000 });
  await page.screenshot({ path: join(shots, '5-compare.png') });
  results.fork = fork;

  // 6. A 10,000-transition run: first render and scrolling.
  await page.goto(base + '#/');
  await page.waitForSelector('table.runs');
  await page.goto(base + '#/run/' + runs.big);
  await page.waitForFunction(() => window.__runtape.firstRenderMs !== undefined, null, { timeout: 60000 });
  const total = await page.evaluate(() => document.querySelector('#timeline .spacer').offsetHeight / 24);
  check(total >= 10000, 'the timeline has every step: ' + total);
  results.first_render_ms = await page.evaluate(() => window.__runtape.firstRenderMs);
  const cold = await context.newPage();
  const t0 = Date.now();
  await cold.goto(base + '#/run/' + runs.big);
  await cold.waitForSelector('.row[data-seq]:not(.placeholder)');
  results.cold_open_ms = Date.now() - t0;
  results.cold_first_render_ms = await cold.evaluate(() => window.__runtape.firstRenderMs);
  await cold.close();
  results.rows_in_dom = await page.evaluate(() => document.querySelectorAll('#timeline .row').length);
  check(results.rows_in_dom < 200, 'only the rows in view exist: ' + results.rows_in_dom);
  // Jumps: time until the rows in view are filled after setting the scroll position.
  results.jump_ms = [];
  for (const at of [0.5, 0.1, 0.9, 0.0, 0.75]) {
    const ms = await page.evaluate(async (frac) => {
      const box = document.querySelector('#timeline');
      const start = performance.now();
      box.scrollTop = frac * (box.scrollHeight - box.clientHeight);
      for (;;) {
        await new Promise((r) => requestAnimationFrame(r));
        const first = Math.floor(box.scrollTop / 24) + 1;
        const row = box.querySelector(`.row[data-seq="${first + 5}"]`);
        if (row && !row.classList.contains('placeholder')) return performance.now() - start;
        if (performance.now() - start > 20000) return -1;
      }
    }, at);
    check(ms >= 0, 'rows filled after a jump to ' + at);
    results.jump_ms.push(Math.round(ms));
  }
  // Continuous scrolling: 120 frames of 600 px each; the time per frame.
  results.scroll_frame_ms = await page.evaluate(async () => {
    const box = document.querySelector('#timeline');
    box.scrollTop = 0;
    await new Promise((r) => requestAnimationFrame(r));
    const start = performance.now();
    for (let i = 0; i < 120; i++) {
      box.scrollTop += 600;
      await new Promise((r) => requestAnimationFrame(r));
    }
    return (performance.now() - start) / 120;
  });
  await page.screenshot({ path: join(shots, '6-long-run.png') });

  // 7. A compensated run: its saga's steps (9: the failure starts it, 10 and 11: the undos) are
  // marked in the timeline and say which call each undid.
  await page.goto(base + '#/run/' + runs.saga);
  await page.waitForSelector('.row[data-seq="11"]');
  const sagaRows = await page.evaluate(() => [...document.querySelectorAll('#timeline .row.saga')].map((r) => Number(r.dataset.seq)).sort((a, b) => a - b));
  check(JSON.stringify(sagaRows) === '[9,10,11]', 'the saga steps are marked: ' + JSON.stringify(sagaRows));
  check(!(await page.isVisible('.row.saga[data-seq="8"]')), 'a step before the saga is not marked');
  const last = await page.textContent('.row[data-seq="11"] .sum');
  check(last.includes('undo of call_3_0 by delete: undone; saga over: compensated'), 'the last undo says the saga is over: ' + last);
  await page.screenshot({ path: join(shots, '7-saga.png') });

  check(foreign.length === 0, 'requests to other hosts: ' + foreign.join(', '));
  check(problems.length === 0, 'page errors: ' + problems.join(' | '));
  console.log(JSON.stringify(results));
});
