// Durable time on the runtape page in Debian's Chromium, driven by playwright-core: a sleeping
// run with its wake time and a countdown, an approval's deadline and what passing it decides, a
// schedule's next fire time, and a compensated saga's steps in the timeline. Run by
// tests/it/serve/time_in_the_browser.rs, which starts `runtape serve` and prepares the runs:
//   BASE_URL    the server's URL
//   RUNS        JSON: { sleeping, waiting, saga, schedule } ids and the schedule's name
//   SHOTS       directory for screenshots (written on every run, never committed)
//   CHROMIUM    the browser binary (/usr/bin/chromium)
//   RUNTAPE_BROWSER_MODULES  the folder tests/browser/install.sh installed into
// Prints one JSON line of what the page showed; exits 1 with a message on failure.
import { base, check, runs, shots, withChromium } from './chromium.mjs';
import { join } from 'node:path';

const shown = {};

async function get(path) {
  const r = await fetch(new URL(path, base));
  check(r.ok, path + ' answered ' + r.status);
  return r.json();
}
const iso = (ms) => new Date(ms).toISOString().replace('T', ' ').slice(0, 19) + 'Z';

await withChromium('time scenario', 'time-failure.png', async (context) => {
  const page = context.pages()[0] || await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(String(e)));

  // 1. The runs list: the sleeping run is `sleeping` with its wake time; the approval shows its
  // deadline. Both are the instants the server gave.
  const sleeping = await get('/api/runs/' + runs.sleeping);
  check(sleeping.sleeping === true && typeof sleeping.wakes_ms === 'number', 'the API says the run sleeps: ' + JSON.stringify(sleeping));
  await page.goto(base + '#/');
  await page.waitForSelector(`tr[data-run="${runs.sleeping}"] [data-status="sleeping"]`);
  shown.list_wakes = await page.textContent(`tr[data-run="${runs.sleeping}"] .wakes`);
  check(shown.list_wakes.startsWith('wakes ' + iso(sleeping.wakes_ms)), 'the list shows the wake time: ' + shown.list_wakes);
  shown.list_deadline = await page.textContent(`tr[data-run="${runs.waiting}"] .wakes`);
  check(shown.list_deadline.startsWith('deadline '), 'the list shows the approval\'s deadline: ' + shown.list_deadline);
  await page.screenshot({ path: join(shots, 'time-1-runs.png') });

  // 2. The sleeping run: its wake time and a countdown that ticks.
  await page.goto(base + '#/run/' + runs.sleeping);
  await page.waitForSelector('#run-wakes [data-due-ms]');
  check(Number(await page.getAttribute('#run-wakes [data-due-ms]', 'data-due-ms')) === sleeping.wakes_ms, 'the countdown counts to the server\'s instant');
  shown.wakes = await page.textContent('#run-wakes');
  check(shown.wakes.includes(iso(sleeping.wakes_ms)), 'the run shows when it wakes: ' + shown.wakes);
  check(/\((in 59m \d+s|in 1h 0m)\)/.test(shown.wakes), 'the countdown says an hour or just under: ' + shown.wakes);
  const first = await page.textContent('#run-wakes .due');
  await page.waitForFunction((t) => document.querySelector('#run-wakes .due').textContent !== t, first);
  shown.countdown_ticks = [first, await page.textContent('#run-wakes .due')];
  await page.screenshot({ path: join(shots, 'time-2-sleeping.png') });

  // The countdown comes from the server's clock: a browser whose clock is three days ahead
  // still counts an hour down, not `due now`.
  const skewed = await context.newPage();
  await skewed.addInitScript(() => {
    const real = Date.now.bind(Date);
    Date.now = () => real() + 3 * 86400000;
  });
  await skewed.goto(base + '#/run/' + runs.sleeping);
  await skewed.waitForSelector('#run-wakes .due');
  check(await skewed.evaluate(() => Date.now() - performance.timeOrigin > 86400000), 'the page\'s clock is skewed');
  shown.skewed = await skewed.textContent('#run-wakes .due');
  check(/^(in 59m \d+s|in 1h 0m)$/.test(shown.skewed), 'a skewed browser clock changes no countdown: ' + shown.skewed);
  await skewed.close();

  // 3. The approval under a deadline: when, what happens then, and the inputs to answer it.
  const waiting = await get('/api/runs/' + runs.waiting);
  const deadline = waiting.waiting[0].deadline;
  check(deadline && deadline.then === 'reject', 'the API gives the deadline: ' + JSON.stringify(waiting.waiting));
  await page.goto(base + '#/run/' + runs.waiting);
  await page.waitForSelector('.waiting .deadline [data-due-ms]');
  check(Number(await page.getAttribute('.waiting .deadline [data-due-ms]', 'data-due-ms')) === deadline.due_ms, 'the deadline counts to the server\'s instant');
  shown.deadline = await page.textContent('.waiting .deadline');
  check(shown.deadline.includes(iso(deadline.due_ms)) && /in 23h 59m|in 1d 0h/.test(shown.deadline), 'the approval shows its deadline: ' + shown.deadline);
  check(shown.deadline.includes('if nobody answers by then, it is rejected'), 'and what passing it decides: ' + shown.deadline);
  check(await page.isVisible('.waiting .approve'), 'it can still be approved');
  await page.screenshot({ path: join(shots, 'time-3-deadline.png') });

  // 4. The schedule's next fire time.
  const schedules = await get('/api/schedules');
  const mine = schedules.schedules.find((s) => s.name === runs.schedule);
  check(mine && typeof mine.next_ms === 'number', 'the API gives the next fire time: ' + JSON.stringify(schedules));
  await page.goto(base + '#/schedules');
  await page.waitForSelector(`tr[data-schedule="${runs.schedule}"] .next-fire [data-due-ms]`);
  check(Number(await page.getAttribute(`tr[data-schedule="${runs.schedule}"] .next-fire [data-due-ms]`, 'data-due-ms')) === mine.next_ms, 'the next fire time is the server\'s');
  shown.schedule = await page.textContent(`tr[data-schedule="${runs.schedule}"]`);
  check(shown.schedule.includes(iso(mine.next_ms)) && shown.schedule.includes(mine.next_local) && shown.schedule.includes(mine.cron), 'the schedule shows its next fire time: ' + shown.schedule);
  check(/\(in \d+[dhm]/.test(shown.schedule), 'with a countdown: ' + shown.schedule);
  await page.screenshot({ path: join(shots, 'time-4-schedules.png') });

  // 5. The compensated saga: its steps stand out in the timeline and say they compensate.
  await page.goto(base + '#/run/' + runs.saga);
  await page.waitForSelector('.row[data-seq="11"]');
  shown.saga_rows = await page.evaluate(() => [...document.querySelectorAll('#timeline .row.saga')].map((r) => Number(r.dataset.seq)).sort((a, b) => a - b));
  check(JSON.stringify(shown.saga_rows) === '[9,10,11]', 'the saga steps are marked: ' + JSON.stringify(shown.saga_rows));
  shown.saga_last = await page.textContent('.row[data-seq="11"]');
  check(shown.saga_last.includes('compensation: ') && shown.saga_last.includes('undo of call_3_0 by delete: undone'), 'an undo says what it undid: ' + shown.saga_last);
  await page.screenshot({ path: join(shots, 'time-5-saga.png') });

  check(problems.length === 0, 'page errors: ' + problems.join(' | '));
  console.log(JSON.stringify(shown));
});
