// The runtape page: runs, a run's timeline and steps, actions, and comparing two runs.
// Plain JavaScript with no library; it only calls the server's API (see /openapi.json).
'use strict';

const ROW_H = 24;          // timeline row height, px (matches .row in app.css)
const PAGE = 200;          // timeline entries fetched per request
const OVERSCAN = 20;       // rows rendered beyond the visible ones

const $ = (sel, root = document) => root.querySelector(sel);
const view = () => $('#view');
const perf = (window.__runtape = { marks: {} });

// ---- small helpers -------------------------------------------------------------------------

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined || kid === false) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}

function usd(nanos) {
  const n = typeof nanos === 'string' ? Number(nanos) : nanos;
  return '$' + (n / 1e9).toFixed(4);
}

function cost(run) {
  if (run.cost_known) return usd(run.cost_nanos);
  return Number(run.cost_nanos) > 0 ? usd(run.cost_nanos) + ' + unknown' : 'cost unknown';
}

// The server's clock: the `now_ms` of its latest answer, paired with this page's monotonic
// clock when it came. Ages and countdowns count from it, so a browser whose clock is off
// still shows when a run wakes as the server will wake it.
const serverClock = { ms: null, at: 0 };
function serverNow() {
  return serverClock.ms === null ? Date.now() : serverClock.ms + (performance.now() - serverClock.at);
}

// `in 59m 58s`, `in 23h 59m`, `in 2d 3h`, or `due now` for a due instant (wall ms).
function countdown(dueMs) {
  let s = Math.floor((Number(dueMs) - serverNow()) / 1000);
  if (s <= 0) return 'due now';
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return 'in ' + d + 'd ' + h + 'h';
  if (h) return 'in ' + h + 'h ' + m + 'm';
  if (m) return 'in ' + m + 'm ' + s + 's';
  return 'in ' + s + 's';
}

// An instant the server gave, written out, with a countdown to it that ticks every second.
function dueAt(dueMs, attrs = {}) {
  const at = new Date(Number(dueMs)).toISOString().replace('T', ' ').slice(0, 19) + 'Z';
  const left = el('span', { class: 'due', 'data-due-ms': String(dueMs), text: countdown(dueMs) });
  return el('span', attrs, el('time', { datetime: new Date(Number(dueMs)).toISOString(), text: at }), ' (', left, ')');
}
setInterval(() => {
  for (const e of document.querySelectorAll('[data-due-ms]')) e.textContent = countdown(e.dataset.dueMs);
}, 1000);

// Says `text` to a screen reader (the page's polite live region), once.
function announce(text) {
  const box = $('#announce');
  if (!box) return;
  box.textContent = '';
  // A new text node in the next frame is announced even when the text repeats.
  requestAnimationFrame(() => { box.textContent = text; });
}

function age(ms) {
  const s = Math.max(0, Math.floor((serverNow() - ms) / 1000));
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm';
  if (s < 86400) return Math.floor(s / 3600) + 'h';
  return Math.floor(s / 86400) + 'd';
}

function clock(ms) {
  return new Date(ms).toISOString().slice(11, 23);
}

function statusOf(run) {
  if (run.sleeping) return 'sleeping';
  return run.interrupted ? 'interrupted' : run.status;
}

// When a run's earliest timer comes due: its wake time when it only sleeps, else the deadline
// of a call waiting for a person.
function wakes(run, attrs = {}) {
  if (run.wakes_ms === undefined || run.wakes_ms === null) return null;
  const to = run.waits_for && run.waits_for.length ? ', waits for ' + run.waits_for.join(', ') : '';
  return el('span', { class: 'wakes', ...attrs }, run.sleeping ? 'wakes ' : 'deadline ', dueAt(run.wakes_ms), to);
}

// A run's session, as `ls` marks it: `session trip-1 #3`, or a fork / replay of that run
// (which hold no place in the session).
function sessionMark(r) {
  if (!r.session) return null;
  const kind = r.session_kind === 'run' ? '' : ' (' + r.session_kind + ')';
  return el('span', { class: 'session', title: 'session ' + r.session, text: 'session ' + r.session + ' #' + r.session_index + kind + ' ' });
}

function badge(run) {
  const s = statusOf(run);
  return el('span', { class: 'badge ' + s, 'data-status': s, text: s.replace('_', ' ') });
}

function json(v) {
  return el('pre', { class: 'mono' }, JSON.stringify(v, null, 2));
}

function flash(text, kind = 'error') {
  const f = $('#flash');
  f.textContent = text;
  f.className = 'flash' + (kind === 'info' ? ' info' : '');
  // An error interrupts a screen reader; a confirmation waits its turn.
  f.setAttribute('role', kind === 'info' ? 'status' : 'alert');
  f.hidden = false;
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => { f.hidden = true; }, kind === 'info' ? 4000 : 10000);
}

// ---- the API -------------------------------------------------------------------------------

function headers(extra = {}) {
  const h = { ...extra };
  const t = sessionStorage.getItem('runtape.token');
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(path, body) {
  const init = body === undefined
    ? { headers: headers() }
    : { method: 'POST', headers: headers({ 'Content-Type': 'application/json' }), body: JSON.stringify(body) };
  const res = await fetch(path, init);
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = { error: text }; }
  if (data && typeof data.now_ms === 'number') { serverClock.ms = data.now_ms; serverClock.at = performance.now(); }
  if (res.status === 401) askToken();
  if (!res.ok) throw new ApiError(res.status, (data && data.error) || res.statusText);
  return data;
}

function askToken() {
  const form = $('#login');
  form.hidden = false;
  form.onsubmit = (e) => {
    e.preventDefault();
    sessionStorage.setItem('runtape.token', $('#token').value.trim());
    form.hidden = true;
    route();
  };
}

// Server-Sent Events over fetch (so the token can be sent), reconnecting with Last-Event-ID.
function follow(path, lastId, onEvent) {
  const ctl = new AbortController();
  let last = lastId;
  (async () => {
    while (!ctl.signal.aborted) {
      try {
        const h = headers({ Accept: 'text/event-stream' });
        if (last !== null && last !== undefined) h['Last-Event-ID'] = String(last);
        const res = await fetch(path, { headers: h, signal: ctl.signal });
        if (res.status === 401) { askToken(); return; }
        if (!res.ok) throw new Error(res.statusText);
        const reader = res.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        let ev = { event: 'message', data: '', id: null };
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf('\n')) >= 0) {
            let line = buf.slice(0, i);
            buf = buf.slice(i + 1);
            if (line.endsWith('\r')) line = line.slice(0, -1);
            if (line === '') {
              if (ev.id !== null) last = ev.id;
              if (ev.data !== '') {
                try { onEvent(ev.event, JSON.parse(ev.data), ev.id); } catch (e) { console.error(e); }
              }
              ev = { event: 'message', data: '', id: null };
              continue;
            }
            if (line.startsWith(':')) continue;
            const c = line.indexOf(':');
            const field = c < 0 ? line : line.slice(0, c);
            let v = c < 0 ? '' : line.slice(c + 1);
            if (v.startsWith(' ')) v = v.slice(1);
            if (field === 'event') ev.event = v;
            else if (field === 'data') ev.data += (ev.data ? '\n' : '') + v;
            else if (field === 'id') ev.id = v;
          }
        }
      } catch (e) {
        if (ctl.signal.aborted) return;
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  })();
  return () => ctl.abort();
}

// ---- routing -------------------------------------------------------------------------------

let cleanup = [];
function onLeave(f) { cleanup.push(f); }

function route() {
  for (const f of cleanup) { try { f(); } catch (_) { /* ignore */ } }
  cleanup = [];
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  view().replaceChildren();
  // The view's link in the navigation says it is the current page (a run or a comparison
  // belongs to Runs).
  const here = '#/' + (['run', 'diff'].includes(parts[0]) ? '' : parts[0]);
  for (const a of document.querySelectorAll('header nav a')) {
    if (a.getAttribute('href') === here) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (parts[0] === 'run' && parts[1]) return runPage(parts[1], parts[2] ? Number(parts[2]) : null);
  if (parts[0] === 'diff' && parts[1] && parts[2]) return comparePage(parts[1], parts[2]);
  if (parts[0] === 'stats') return statsPage();
  if (parts[0] === 'schedules') return schedulesPage();
  if (parts[0] === 'experiments') return experimentsPage(parts[1]); // experiments.js
  return runsPage();
}

window.addEventListener('hashchange', route);
window.addEventListener('DOMContentLoaded', async () => {
  perf.marks.loaded = performance.now();
  try {
    const info = await api('/api/info');
    $('#server').textContent = 'runtape ' + info.version + ' · ' + info.db;
  } catch (_) { /* the login form is shown on 401 */ }
  route();
});

// ---- runs ----------------------------------------------------------------------------------

function runsPage() {
  const status = el('select', { id: 'filter-status', 'aria-label': 'status' },
    ['', 'queued', 'running', 'interrupted', 'paused', 'awaiting_input', 'budget_exhausted', 'completed', 'failed', 'cancelled']
      .map((s) => el('option', { value: s, text: s || 'any status' })));
  const text = el('input', { id: 'filter-text', type: 'search', placeholder: 'id, goal, answer, reason, session', 'aria-label': 'search' });
  text.value = sessionStorage.getItem('runtape-q') || '';
  sessionStorage.removeItem('runtape-q');
  const input = (id, label, attrs = {}) => el('input', { id, 'aria-label': label, placeholder: label, ...attrs });
  const agent = input('filter-agent', 'agent', { size: 10 });
  const tag = input('filter-tag', 'tag key=value', { size: 14 });
  const spec = input('filter-spec', 'spec digest', { size: 12 });
  const relation = el('select', { id: 'filter-relation', 'aria-label': 'relation' },
    ['', 'root', 'fork', 'child'].map((s) => el('option', { value: s, text: s || 'any relation' })));
  const from = input('filter-from', 'started from', { type: 'datetime-local' });
  const to = input('filter-to', 'started before', { type: 'datetime-local' });
  const costMin = input('filter-cost-min', 'min $', { size: 6, inputmode: 'decimal' });
  const costMax = input('filter-cost-max', 'max $', { size: 6, inputmode: 'decimal' });
  const durMin = input('filter-duration-min', 'min s', { size: 5, inputmode: 'decimal' });
  const durMax = input('filter-duration-max', 'max s', { size: 5, inputmode: 'decimal' });
  const sort = el('select', { id: 'filter-sort', 'aria-label': 'sort' },
    [['started', 'newest'], ['cost', 'cost'], ['duration', 'duration']].map(([v, t]) => el('option', { value: v, text: 'by ' + t })));
  const order = el('select', { id: 'filter-order', 'aria-label': 'order' },
    [['desc', 'largest first'], ['asc', 'smallest first']].map(([v, t]) => el('option', { value: v, text: t })));
  const body = el('tbody');
  const count = el('span', { class: 'muted', id: 'runs-count' });
  const more = el('button', { id: 'runs-more', hidden: true }, 'More runs');
  const specPath = el('input', { id: 'start-spec', placeholder: 'examples/approval.toml', size: 40 });
  const specText = el('textarea', { id: 'start-toml', placeholder: 'or paste a spec (TOML)' });
  const goal = el('input', { id: 'start-goal', placeholder: 'goal (default: the spec\'s)', size: 40 });
  const start = el('details', { class: 'panel' },
    el('summary', { text: 'Start a run' }),
    el('div', { class: 'toolbar' },
      el('label', { for: 'start-spec', text: 'Spec file on the server' }), specPath,
      el('label', { for: 'start-goal', text: 'Goal' }), goal),
    el('label', { for: 'start-toml', text: 'Or the spec itself (TOML)' }),
    specText,
    el('div', { class: 'toolbar' }, el('button', {
      class: 'primary', id: 'start-run',
      onclick: async () => {
        const req = { goal: goal.value || undefined };
        if (specText.value.trim()) req.spec_toml = specText.value; else req.spec = specPath.value;
        try {
          const r = await api('/api/runs', req);
          location.hash = '#/run/' + r.id;
        } catch (e) { flash(e.message); }
      },
    }, 'Start')));
  view().append(
    el('div', { class: 'toolbar' }, el('h1', { text: 'Runs' }), status, text, agent, tag, relation, sort, order, count),
    el('div', { class: 'toolbar filters' }, 'started', from, to, 'cost', costMin, costMax, 'duration', durMin, durMax, spec),
    start,
    el('table', { class: 'runs', 'aria-label': 'Runs' },
      el('thead', {}, el('tr', {}, ['run', 'status', 'agent', 'steps', 'tokens', 'cost', 'took', 'age', 'goal', 'relations'].map((h) => el('th', { text: h })))),
      body),
    el('div', { class: 'toolbar' }, more));
  let runs = [];
  let next = null;
  const took = (r) => {
    const s = Math.max(0, (Number(r.updated_ms) - Number(r.created_ms)) / 1000);
    return s < 60 ? s.toFixed(1) + 's' : Math.round(s / 60) + 'm';
  };
  const filterBy = (box, value) => (ev) => { ev.preventDefault(); box.value = value; reload(); };
  const draw = () => {
    const byParent = {};
    for (const r of runs) if (r.parent) (byParent[r.parent.run] ||= []).push(r);
    body.replaceChildren(...runs.map((r) => el('tr', { 'data-run': r.id },
      el('td', {}, el('a', { class: 'mono', href: '#/run/' + r.id, text: r.id })),
      el('td', {}, badge(r), r.wakes_ms !== undefined ? el('br') : null, wakes(r)),
      el('td', {}, el('a', { href: '#/', class: 'filter-link', onclick: filterBy(agent, r.agent), text: r.agent })),
      el('td', { text: r.steps }),
      el('td', { text: r.tokens }),
      el('td', { text: cost(r) }),
      el('td', { text: took(r) }),
      el('td', { text: age(r.updated_ms) }),
      el('td', { class: 'goal' }, r.goal,
        r.reason ? el('div', { class: 'reason', text: r.reason }) : null,
        r.tags ? el('div', { class: 'tags' }, ...Object.entries(r.tags).map(([k, v]) =>
          el('a', { href: '#/', class: 'tag', onclick: filterBy(tag, k + '=' + v), text: k + '=' + v }))) : null),
      el('td', {},
        sessionMark(r),
        r.parent ? el('span', {}, 'fork of ', el('a', { href: '#/run/' + r.parent.run + '/' + r.parent.seq, text: r.parent.run + '@' + r.parent.seq }), ' ',
          el('a', { href: '#/diff/' + r.parent.run + '/' + r.id, text: 'compare' })) : null,
        (byParent[r.id] || []).length ? el('span', { class: 'muted', text: ' ' + byParent[r.id].length + ' fork(s)' }) : null))));
    count.textContent = runs.length + (next ? '+' : '') + ' run(s)';
    more.hidden = !next;
  };
  const query = () => {
    const q = new URLSearchParams();
    const set = (k, v) => { if (v) q.set(k, v); };
    set('status', status.value);
    set('q', text.value);
    set('agent', agent.value.trim());
    set('tag', tag.value.trim());
    set('spec', spec.value.trim());
    set('relation', relation.value);
    if (from.value) q.set('from', String(new Date(from.value).getTime()));
    if (to.value) q.set('to', String(new Date(to.value).getTime()));
    set('cost_min', costMin.value.trim());
    set('cost_max', costMax.value.trim());
    if (durMin.value.trim()) q.set('duration_min', String(Math.round(Number(durMin.value) * 1000)));
    if (durMax.value.trim()) q.set('duration_max', String(Math.round(Number(durMax.value) * 1000)));
    if (sort.value !== 'started') q.set('sort', sort.value);
    if (order.value !== 'desc') q.set('order', order.value);
    return q;
  };
  // The first page again (filters changed, or the 2 s refresh): as many runs as are shown.
  let shown = 200;
  let asked = 0;
  const reload = async () => {
    const q = query();
    q.set('limit', String(Math.min(1000, Math.max(200, shown))));
    const mine = ++asked;
    try {
      const r = await api('/api/runs?' + q);
      if (mine !== asked) return;
      runs = r.runs;
      next = r.next || null;
      draw();
    } catch (e) { if (e.status !== 401) flash(e.message); }
  };
  more.onclick = async () => {
    if (!next) return;
    const q = query();
    q.set('limit', '200');
    q.set('cursor', next);
    try {
      const r = await api('/api/runs?' + q);
      runs = runs.concat(r.runs);
      next = r.next || null;
      shown = runs.length;
      draw();
    } catch (e) { flash(e.message); }
  };
  for (const box of [status, relation, sort, order, from, to]) box.onchange = () => { shown = 200; reload(); };
  for (const box of [text, agent, tag, spec, costMin, costMax, durMin, durMax]) box.oninput = () => { shown = 200; reload(); };
  reload();
  const timer = setInterval(reload, 2000);
  onLeave(() => clearInterval(timer));
}

// ---- what the runs add up to ---------------------------------------------------------------

function statsPage() {
  const bucket = el('select', { id: 'stats-bucket', 'aria-label': 'time bucket' },
    ['hour', 'day', 'minute'].map((b) => el('option', { value: b, text: 'per ' + b })));
  const boxes = {
    status: el('div', { id: 'stats-status' }), spend: el('div', { id: 'stats-spend' }),
    failures: el('div', { id: 'stats-failures' }), steps: el('div', { id: 'stats-steps' }),
  };
  const panel = (title, box) => el('section', { class: 'panel' }, el('h2', { text: title }), box);
  view().append(
    el('div', { class: 'toolbar' }, el('h1', { text: 'Stats' }), bucket),
    el('div', { class: 'stats' },
      panel('Runs per status over time', boxes.status),
      panel('Cost and tokens per agent and model', boxes.spend),
      panel('Step durations (newest 200 runs)', boxes.steps),
      panel('Failures by reason', boxes.failures)));
  const table = (heads, rows) => el('table', { class: 'runs' },
    // The last column of a table with a bar has no visible title; a screen reader hears one.
    el('thead', {}, el('tr', {}, heads.map((h) => el('th', {}, h || el('span', { class: 'visually-hidden', text: 'bar' }))))),
    el('tbody', {}, rows.map((cells) => el('tr', {}, cells.map((c) => el('td', {}, c))))));
  const bar = (value, max) => el('meter', { min: 0, max: Math.max(1, max), value, 'aria-hidden': 'true' });
  const load = async () => {
    try {
      const [st, sp, fa, steps] = await Promise.all([
        api('/api/stats/status?bucket=' + bucket.value), api('/api/stats/spend'),
        api('/api/stats/failures'), api('/api/stats/steps')]);
      const buckets = [...new Set(st.rows.map((r) => r.bucket_ms))];
      const statuses = [...new Set(st.rows.map((r) => r.status))].sort();
      const n = (b, s) => (st.rows.find((r) => r.bucket_ms === b && r.status === s) || { runs: 0 }).runs;
      const top = Math.max(0, ...buckets.map((b) => statuses.reduce((t, s) => t + n(b, s), 0)));
      boxes.status.replaceChildren(table(['from', ...statuses, 'all', ''], buckets.map((b) => {
        const all = statuses.reduce((t, s) => t + n(b, s), 0);
        return [new Date(b).toISOString().slice(0, 16).replace('T', ' '), ...statuses.map((s) => String(n(b, s))), String(all), bar(all, top)];
      })));
      const costTop = Math.max(0, ...sp.rows.map((r) => Number(r.cost_nanos)));
      boxes.spend.replaceChildren(table(['agent', 'model', 'runs', 'tokens', 'cost', ''],
        sp.rows.map((r) => [r.agent, r.model, String(r.runs), String(r.tokens), usd(r.cost_nanos), bar(Number(r.cost_nanos), costTop)])));
      const slow = Math.max(0, ...steps.rows.map((r) => r.p95_ms));
      boxes.steps.replaceChildren(table(['step', 'steps', 'p50', 'p95', ''],
        steps.rows.map((r) => [r.kind, String(r.steps), r.p50_ms + ' ms', r.p95_ms + ' ms', bar(r.p95_ms, slow)])));
      boxes.failures.replaceChildren(fa.rows.length ? table(['class', 'runs', 'newest reason'],
        fa.rows.map((r) => [el('a', { href: '#/', onclick: () => { sessionStorage.setItem('runtape-q', r.class); }, text: r.class }), String(r.runs), el('span', { class: 'reason', text: r.example })]))
        : el('p', { class: 'muted', text: 'No failed runs.' }));
    } catch (e) { if (e.status !== 401) flash(e.message); }
  };
  bucket.onchange = load;
  load();
}

// ---- schedules -----------------------------------------------------------------------------

// The database's schedules (`runtape schedule add`), each with its next fire time counted down
// from the server's clock, and the run its last instant started.
function schedulesPage() {
  const box = el('div', { id: 'schedules' });
  view().append(el('div', { class: 'toolbar' }, el('h1', { text: 'Schedules' })), box);
  const load = async () => {
    try {
      const r = await api('/api/schedules');
      box.replaceChildren(r.schedules.length ? el('table', { class: 'runs schedules', 'aria-label': 'Schedules' },
        el('thead', {}, el('tr', {}, ['name', 'cron', 'zone', 'status', 'next fire', 'fired', 'last', 'spec', 'goal'].map((h) => el('th', { text: h })))),
        el('tbody', {}, r.schedules.map((s) => el('tr', { 'data-schedule': s.name },
          el('td', { class: 'mono', text: s.name }),
          el('td', {}, el('code', { text: s.cron })),
          el('td', { text: s.tz }),
          el('td', {}, el('span', { class: 'badge ' + (s.status === 'active' ? 'completed' : 'paused'), text: s.status })),
          el('td', { class: 'next-fire' }, s.next_ms !== undefined
            ? [dueAt(s.next_ms), el('br'), el('span', { class: 'muted', text: s.next_local })]
            : el('span', { class: 'muted', text: 'none while paused' })),
          el('td', { text: s.fired }),
          el('td', {}, s.last ? [el('a', { class: 'mono', href: '#/run/' + s.last.run, text: s.last.run }), ' ', el('span', { class: 'muted', text: s.last.state + (s.last.manual ? ' (triggered)' : '') })] : el('span', { class: 'muted', text: 'never' })),
          el('td', {}, el('code', { text: s.spec })),
          el('td', { class: 'goal', text: s.goal || '' })))))
        : el('p', { class: 'muted', text: 'No schedules: runtape schedule add NAME SPEC --cron "0 9 * * 1-5" adds one.' }));
    } catch (e) {
      if (e.status !== 401) box.replaceChildren(el('p', { class: 'muted', text: e.message }));
    }
  };
  load();
  const timer = setInterval(load, 5000);
  onLeave(() => clearInterval(timer));
}

// ---- a run ---------------------------------------------------------------------------------

function runPage(id, initialSeq) {
  // Measured per run page: from here to the first rows of the timeline on screen.
  perf.marks.runStart = performance.now();
  perf.marks.firstRows = undefined;
  perf.firstRenderMs = undefined;
  const st = {
    id, run: null, total: 0, entries: new Map(), pages: new Map(), selected: null,
    follow: initialSeq === null, lastEdge: null, receipts: null, destroyed: false,
  };
  onLeave(() => { st.destroyed = true; });

  const head = el('div', { class: 'run-head' });
  const actions = el('div', { class: 'toolbar', id: 'actions' });
  const waiting = el('div', { id: 'waiting' });
  // The model's words as they stream: shown, not read aloud token by token (the step it
  // commits is announced).
  const live = el('div', { class: 'live', id: 'live', 'aria-live': 'off' });
  const chart = el('section', { class: 'panel statechart-box', id: 'statechart', 'aria-labelledby': 'statechart-title' }, el('h2', { id: 'statechart-title', text: 'Statechart' }));
  // The timeline is a listbox of steps: arrows move the selection, which a screen reader
  // reads out (aria-activedescendant) and the inspector shows.
  const scroller = el('div', { class: 'timeline', id: 'timeline', tabindex: '0', role: 'listbox', 'aria-label': 'Timeline of run ' + id });
  const spacer = el('div', { class: 'spacer', role: 'none' });
  scroller.append(spacer);
  const inspector = el('section', { class: 'panel inspector', id: 'inspector', 'aria-label': 'Selected step' }, el('p', { class: 'muted', text: 'Select a step.' }));
  const forkPanel = el('div', { class: 'panel hidden', id: 'fork-panel' });
  view().append(head, actions, waiting, forkPanel, live,
    el('div', { class: 'grid' },
      el('section', { 'aria-label': 'Timeline' }, el('div', { class: 'toolbar' },
        el('button', { id: 'prev-step', onclick: () => select((st.selected || 2) - 1) }, '↑ previous'),
        el('button', { id: 'next-step', onclick: () => select((st.selected || 0) + 1) }, 'next ↓'),
        el('label', {}, el('input', { type: 'checkbox', id: 'follow', checked: st.follow, onchange: (e) => { st.follow = e.target.checked; } }), ' follow new steps')),
      scroller),
      el('div', {}, chart, inspector)));

  fetch('/api/statechart.svg', { headers: headers() }).then((r) => r.text()).then((svg) => {
    chart.insertAdjacentHTML('beforeend', svg);
    highlight();
  });

  // Timeline: only the rows in view exist; pages of entries are fetched as they come into view.
  const rows = new Map();
  function render() {
    spacer.style.height = (st.total * ROW_H) + 'px';
    const top = scroller.scrollTop;
    const first = Math.max(0, Math.floor(top / ROW_H) - OVERSCAN);
    const last = Math.min(st.total, Math.ceil((top + scroller.clientHeight) / ROW_H) + OVERSCAN);
    for (const [i, row] of rows) {
      if (i < first || i >= last) { row.remove(); rows.delete(i); }
    }
    for (let i = first; i < last; i++) {
      const e = st.entries.get(i + 1);
      let row = rows.get(i);
      if (row && row.dataset.filled === (e ? '1' : '0')) {
        markSelected(row, i + 1);
        continue;
      }
      if (row) row.remove();
      row = e ? stepRow(e) : el('div', { class: 'row placeholder', role: 'option', id: 'step-' + (i + 1), 'aria-label': 'step ' + (i + 1) + ', loading' }, el('span', { class: 'seq', text: i + 1 }), '…');
      row.dataset.filled = e ? '1' : '0';
      row.style.transform = 'translateY(' + (i * ROW_H) + 'px)';
      row.setAttribute('aria-posinset', String(i + 1));
      row.setAttribute('aria-setsize', String(st.total));
      markSelected(row, i + 1);
      spacer.append(row);
      rows.set(i, row);
      if (!e) want(Math.floor(i / PAGE));
    }
    // The selected step's row, when it is in the DOM, is the listbox's active option.
    if (st.selected && rows.has(st.selected - 1)) scroller.setAttribute('aria-activedescendant', 'step-' + st.selected);
    else scroller.removeAttribute('aria-activedescendant');
    if (!perf.marks.firstRows && st.entries.size > 0) {
      perf.marks.firstRows = performance.now();
      perf.firstRenderMs = perf.marks.firstRows - perf.marks.runStart;
    }
  }
  function markSelected(row, seq) {
    const on = st.selected === seq;
    row.classList.toggle('selected', on);
    row.setAttribute('aria-selected', on ? 'true' : 'false');
  }
  function stepRow(e) {
    // A step of a saga (undoing a failed or cancelled run's calls) stands out, and says so.
    const saga = e.from === 'compensating' || e.to === 'compensating' || e.edge.startsWith('any.compensate');
    return el('div', { class: saga ? 'row saga' : 'row', 'data-seq': e.seq, role: 'option', id: 'step-' + e.seq, onclick: () => select(e.seq) },
      el('span', { class: 'seq', text: e.seq }),
      saga ? el('span', { class: 'visually-hidden', text: 'compensation: ' }) : null,
      el('span', { class: 'muted', text: clock(e.at_ms) }),
      el('span', { class: 'edge', title: e.edge, text: e.from + ' → ' + e.to }),
      el('span', { class: 'sum', title: e.summary, text: (e.agent ? e.agent + ': ' : '') + e.summary }),
      el('span', { class: 'muted', text: e.tokens ? e.tokens + ' tok' : '' }));
  }
  async function want(page) {
    if (st.pages.has(page)) return;
    st.pages.set(page, 'loading');
    try {
      const r = await api('/api/runs/' + id + '/timeline?offset=' + (page * PAGE) + '&limit=' + PAGE);
      if (st.destroyed) return;
      for (const e of r.entries) st.entries.set(e.seq, e);
      st.total = Math.max(st.total, r.total);
      st.pages.set(page, 'done');
      render();
    } catch (e) { st.pages.delete(page); }
  }
  let ticking = false;
  scroller.addEventListener('scroll', () => {
    if (ticking) return;
    ticking = true;
    requestAnimationFrame(() => { ticking = false; render(); });
  });
  scroller.addEventListener('keydown', (e) => {
    if (e.key === 'ArrowDown' || e.key === 'j') { e.preventDefault(); select((st.selected || 0) + 1); }
    if (e.key === 'ArrowUp' || e.key === 'k') { e.preventDefault(); select((st.selected || 2) - 1); }
    if (e.key === 'Home') { e.preventDefault(); select(1); }
    if (e.key === 'End') { e.preventDefault(); select(st.total); }
  });

  async function select(seq) {
    if (seq < 1 || seq > st.total) return;
    st.selected = seq;
    const top = (seq - 1) * ROW_H;
    if (top < scroller.scrollTop || top + ROW_H > scroller.scrollTop + scroller.clientHeight) {
      scroller.scrollTop = top - scroller.clientHeight / 2;
    }
    render();
    const entry = st.entries.get(seq);
    announce('Step ' + seq + ' of ' + st.total + (entry ? ': ' + entry.from + ' to ' + entry.to + ', ' + entry.summary : ''));
    history.replaceState(null, '', '#/run/' + id + '/' + seq);
    inspector.replaceChildren(el('p', { class: 'muted', text: 'Loading step ' + seq + '…' }));
    try {
      const step = await api('/api/runs/' + id + '/steps/' + seq);
      if (st.destroyed || st.selected !== seq) return;
      if (!st.receipts) st.receipts = api('/api/runs/' + id + '/receipts').catch(() => ({ receipts: [] }));
      const receipts = (await st.receipts).receipts.filter((r) => r.body.seq === seq);
      showStep(inspector, step, receipts, st);
      highlight(step.state && stateName(step.state.state), step.edge);
    } catch (e) { inspector.replaceChildren(el('p', { class: 'flash', text: e.message })); }
  }
  st.select = select;

  function highlight(stateKind, edge) {
    const svg = $('svg', chart);
    if (!svg) return;
    const current = stateKind || (st.run && stateName(st.run.state));
    for (const g of svg.querySelectorAll('.state')) g.classList.toggle('current', g.id === 'state-' + current);
    if (current) svg.setAttribute('aria-label', "The run's statechart; highlighted: " + current);
    const taken = edge || st.lastEdge;
    for (const g of svg.querySelectorAll('.edge')) {
      g.classList.toggle('taken', !!taken && g.dataset.edges.split(' ').includes(taken));
    }
  }

  function drawHead() {
    const r = st.run;
    head.replaceChildren(...[
      el('h1', { class: 'mono', text: r.id }), badge(r),
      el('span', { text: r.steps + ' steps · ' + r.tokens + ' tokens · ' + cost(r) }),
      sessionMark(r),
      r.parent ? el('span', {}, 'fork of ', el('a', { href: '#/run/' + r.parent.run + '/' + r.parent.seq, text: r.parent.run + '@' + r.parent.seq }), ' · ',
        el('a', { id: 'compare-parent', href: '#/diff/' + r.parent.run + '/' + r.id, text: 'compare with parent' })) : null,
      (r.forks || []).length ? el('span', {}, 'forks: ', ...r.forks.map((f) => el('span', {},
        el('a', { href: '#/run/' + f.run, text: f.run }), ' (', el('a', { href: '#/diff/' + r.id + '/' + f.run, text: 'compare' }), ') '))) : null,
      r.tags ? el('span', { class: 'tags', id: 'run-tags' }, ...Object.entries(r.tags).map(([k, v]) => el('span', { class: 'tag', text: k + '=' + v }))) : null,
      el('div', { class: 'muted', id: 'goal', text: r.goal }),
      r.sleeping && r.wakes_ms !== undefined ? el('div', { id: 'run-wakes' }, 'Sleeping until ', dueAt(r.wakes_ms),
        ': whoever wakes runs (runtape serve, a worker) takes it up then; ', el('code', { text: 'runtape wake ' + r.id }), ' wakes it now.') : null,
      r.reason ? el('div', { class: 'reason', id: 'run-reason', role: 'status', text: (r.status === 'failed' ? 'Failed: ' : '') + r.reason }) : null].filter(Boolean));
    const done = ['completed', 'failed', 'cancelled'].includes(r.status);
    const act = (label, path, body, opts = {}) => el('button', {
      id: opts.id, class: opts.class, disabled: opts.disabled,
      onclick: async () => {
        try {
          const res = await api('/api/runs/' + id + '/' + path, typeof body === 'function' ? body() : body);
          flash(res.message || (res.action + ' ' + res.id), 'info');
          refresh();
        } catch (e) { flash(e.message); }
      },
    }, label);
    actions.replaceChildren(
      act('Pause', 'pause', {}, { id: 'act-pause', disabled: !(r.status === 'running' && r.driven) }),
      act('Resume', 'resume', {}, { id: 'act-resume', disabled: done || (r.status === 'running' && r.driven) }),
      act('Cancel', 'cancel', {}, { id: 'act-cancel', class: 'danger', disabled: done }),
      el('button', { id: 'act-verify', onclick: verify }, 'Verify'),
      el('input', { id: 'raise-value', placeholder: 'budget.max_turns=80', size: 22, 'aria-label': 'budget to raise (KEY=VALUE)' }),
      act('Raise budget', 'raise', () => ({ raise: [$('#raise-value').value] }), { id: 'act-raise', disabled: done }),
      el('button', { id: 'act-fork', onclick: openFork }, 'Fork from selected step…'));
    waiting.replaceChildren(...(r.waiting || []).map((w) => waitingCard(w)));
    highlight();
  }

  function waitingCard(w) {
    const reason = el('input', { placeholder: 'reason (optional)', class: 'reject-reason', 'aria-label': 'reason to reject ' + w.call_id + ' (optional)' });
    const answerLabel = w.kind === 'in_doubt' ? 'result to record' : 'answer';
    const answer = el('input', { placeholder: answerLabel, class: 'answer-text', size: 30, 'aria-label': answerLabel + ' for ' + w.call_id });
    // What passing the deadline decides, as the spec says.
    const then = (t) => typeof t === 'string' ? { reject: 'it is rejected', approve: 'it is approved', fail: 'the run fails' }[t] || t
      : t.escalate ? 'it is escalated to ' + t.escalate.to
      : 'it is answered "' + t.input + '"';
    const send = (path, body) => async () => {
      try {
        await api('/api/runs/' + id + '/' + path, { call: w.call_id, ...body });
        flash(path + ' sent for ' + w.call_id, 'info');
        refresh();
      } catch (e) { flash(e.message); }
    };
    return el('section', { class: 'panel waiting', 'data-call': w.call_id, 'aria-label': 'Waiting call ' + w.call_id },
      el('h2', { text: 'waiting for a person: ' + w.kind.replace('_', ' ') }),
      el('div', {}, el('b', { text: w.tool }), ' ', el('code', { text: JSON.stringify(w.args) }), el('span', { class: 'muted', text: ' (' + w.call_id + ')' })),
      w.escalated ? el('p', { class: 'escalated', text: 'Waits for ' + w.escalated.to + ' (escalated ' + w.escalated.times + '×: nobody answered before an earlier deadline).' }) : null,
      w.deadline ? el('p', { class: 'deadline' }, 'Deadline ', dueAt(w.deadline.due_ms), ': if nobody answers by then, ' + then(w.deadline.then) + '.') : null,
      el('div', { class: 'toolbar' },
        w.kind !== 'question' ? el('button', { class: 'primary approve', onclick: send('approve', {}) }, w.kind === 'in_doubt' ? 'Perform again' : 'Approve') : null,
        reason, el('button', { class: 'danger reject', onclick: () => send('reject', { reason: reason.value || undefined })() }, 'Reject'),
        answer, el('button', { class: 'answer', onclick: () => send('answer', { text: answer.value })() }, 'Answer')));
  }

  async function verify() {
    try {
      const v = await api('/api/runs/' + id + '/verify');
      if (v.ok) {
        flash('verified: ' + v.transitions + ' transitions replay, head ' + v.head.sealed + ', ' + v.receipts.receipts + ' receipts check', 'info');
      } else {
        flash('does not verify at step ' + v.seq + ': ' + v.what);
      }
    } catch (e) { flash(e.message); }
  }

  function openFork() {
    const seq = st.selected;
    if (!seq) { flash('select the step to fork from first'); return; }
    const kind = el('select', { id: 'fork-kind', 'aria-label': 'edit to make' }, ['user', 'tool', 'budget', 'none'].map((k) => el('option', { value: k, text: { user: 'replace the last user message', tool: 'replace a tool result', budget: 'set a budget', none: 'no edit' }[k] })));
    const callId = el('input', { id: 'fork-call', placeholder: 'call id (tool edits)', size: 16, 'aria-label': 'call id (tool edits)' });
    const value = el('input', { id: 'fork-value', placeholder: 'new text / value / budget.KEY=VALUE', size: 40, 'aria-label': 'new text, value or budget.KEY=VALUE' });
    const tape = el('select', { id: 'fork-mode', 'aria-label': 'how the fork runs' }, el('option', { value: 'live', text: 'live' }), el('option', { value: 'tape', text: 'from the tape (go live at the first difference)' }), el('option', { value: 'stop', text: 'from the tape (stop at the first difference)' }));
    forkPanel.classList.remove('hidden');
    forkPanel.replaceChildren(el('h2', { text: 'Fork ' + id + ' at step ' + seq }),
      el('div', { class: 'toolbar' }, kind, callId, value, tape,
        el('button', {
          class: 'primary', id: 'fork-go',
          onclick: async () => {
            const edits = [];
            if (kind.value === 'user') edits.push('user=' + value.value);
            if (kind.value === 'tool') edits.push('tool:' + callId.value + '=' + value.value);
            if (kind.value === 'budget') edits.push(value.value);
            try {
              const r = await api('/api/runs/' + id + '/fork', { seq, edits, tape: tape.value !== 'live', stop_on_divergence: tape.value === 'stop' });
              flash('forked as ' + r.id, 'info');
              location.hash = '#/diff/' + id + '/' + r.id;
            } catch (e) { flash(e.message); }
          },
        }, 'Fork'),
        el('button', { onclick: () => forkPanel.classList.add('hidden') }, 'Close')));
  }

  async function refresh() {
    try {
      const fresh = await api('/api/runs/' + id);
      // A live 'run' event may have moved past what this request read while its answer was on
      // the way (an approval's run finishing at once): an older view never replaces a newer one.
      if (st.run && fresh.steps < st.run.steps) return;
      st.run = fresh;
      if (!st.destroyed) drawHead();
    } catch (e) { flash(e.message); }
  }

  // Live: steps appear as they commit; the header follows the run's row.
  let liveText = '';
  async function start() {
    await refresh();
    if (!st.run) return;
    st.total = st.run.steps;
    render();
    const after = st.total;
    const stop = follow('/api/runs/' + id + '/events', after, (event, data) => {
      if (event === 'step') {
        st.entries.set(data.seq, data);
        st.lastEdge = data.edge;
        if (data.seq > st.total) st.total = data.seq;
        liveText = '';
        live.textContent = '';
        announce('New step ' + data.seq + ': ' + data.from + ' to ' + data.to + (data.summary ? ', ' + data.summary : ''));
        render();
        const row = rows.get(data.seq - 1);
        if (row) row.classList.add('new');
        if (st.follow) scroller.scrollTop = st.total * ROW_H;
        highlight(null, data.edge);
      } else if (event === 'run') {
        const waitingBefore = JSON.stringify((st.run && st.run.waiting) || []);
        const before = st.run && statusOf(st.run);
        st.run = { ...st.run, ...data };
        if (before && statusOf(st.run) !== before) announce('Run ' + id + ' is now ' + statusOf(st.run).replace('_', ' '));
        drawHead();
        if (data.status === 'awaiting_input' || waitingBefore !== '[]') refresh();
      } else if (event === 'trace') {
        if (data.type === 'model.token') { liveText += data.text; live.textContent = data.agent + ' is writing: ' + liveText.slice(-200); }
        else if (data.type === 'model.request') live.textContent = data.agent + ' asks ' + data.provider + '/' + data.model + '…';
        else if (data.type === 'tool.call') live.textContent = data.agent + ' calls ' + data.tool + '…';
      }
    });
    onLeave(stop);
    if (initialSeq) select(initialSeq);
    else if (st.total) { scroller.scrollTop = st.total * ROW_H; }
    render();
  }
  start();
}

function stateName(kind) {
  const names = { created: 'Created', preparing: 'Preparing', generating: 'Generating', calling_tools: 'CallingTools', awaiting_input: 'AwaitingInput', handoff: 'Handoff', budget_exhausted: 'BudgetExhausted', publishing: 'Publishing', done: 'Done' };
  return names[kind] || kind;
}

function showStep(box, step, receipts) {
  const data = step.state && step.state.run;
  const parts = [
    el('h2', { text: 'Step ' + step.seq + ' of ' + step.latest }),
    el('dl', { class: 'kv' },
      el('dt', { text: 'edge' }), el('dd', { class: 'mono', id: 'step-edge', text: step.edge || '—' }),
      el('dt', { text: 'event' }), el('dd', { text: step.event ? step.event.body.type : '—' }),
      el('dt', { text: 'state' }), el('dd', { id: 'step-state', text: step.state.state }),
      data ? el('dt', { text: 'agent' }) : null, data ? el('dd', { text: data.active }) : null,
      el('dt', { text: 'state hash' }), el('dd', { class: 'mono', text: step.state_hash.slice(0, 16) + '…' })),
  ];
  if (step.request) parts.push(requestView(step.request, step.run));
  const body = step.event && step.event.body;
  if (body && body.type === 'model_replied') {
    const r = body.reply;
    const u = r.usage;
    const read = u ? (u.cached_input_tokens || 0) + (u.cache_read_input_tokens || 0) : 0;
    const written = u ? u.cache_creation_input_tokens || 0 : 0;
    const cache = read + written ? ' (cache: ' + read + ' read, ' + written + ' written)' : '';
    const ended = step.reply_end === 'refused'
      ? 'Refused: ' + (r.refusal || r.text || '(no explanation given)')
      : step.reply_end === 'truncated'
        ? "Truncated: the output-token limit cut this reply; the agent's on_truncated decides what follows"
        : null;
    parts.push(el('div', { class: 'panel', id: 'reply' },
      el('h3', { text: 'Model reply' + (u ? ' · ' + u.input_tokens + ' in, ' + u.output_tokens + ' out' + cache : '') }),
      ended ? el('p', { id: 'reply-end', class: 'warn', text: ended }) : null,
      r.text ? el('div', { class: 'msg assistant' }, el('pre', { text: r.text })) : null,
      ...(r.tool_calls || []).map((c) => el('div', {}, el('b', { text: c.name }), json(c.arguments)))));
  }
  if (body && body.type === 'tool_returned') {
    parts.push(el('div', { class: 'panel', id: 'tool-result' }, el('h3', { text: 'Tool result' }), json(body.outcome)));
  }
  if (step.event) parts.push(el('details', {}, el('summary', { text: 'event' }), json(step.event)));
  if (step.effects.length) parts.push(el('details', { open: !step.request }, el('summary', { text: 'effects (' + step.effects.length + ')' }), json(step.effects)));
  if (data && data.memory) parts.push(el('details', { id: 'step-memory' }, el('summary', { text: 'memory at this step' }), json(data.memory)));
  // Values kept from the model ($r1, $r2, …): a person may read what the model may not.
  if (data && data.hidden) {
    parts.push(el('details', { id: 'step-hidden', open: true },
      el('summary', { text: 'hidden from the model (' + data.hidden.length + ')' }),
      ...data.hidden.map((h, i) => el('div', { class: 'hidden-value' },
        el('b', { text: '$r' + (i + 1) }),
        el('span', { class: 'muted', text: ' ' + ((h.label && h.label.integrity) || 'trusted') + ((h.label && h.label.confidentiality) ? ', ' + h.label.confidentiality : '') + ' · from ' + h.source + ' call ' + h.call_id }),
        el('pre', { text: typeof h.value === 'string' ? h.value : JSON.stringify(h.value) })))));
  }
  parts.push(el('details', {}, el('summary', { text: 'state' }), json(step.state)));
  parts.push(el('details', {}, el('summary', { text: 'receipts (' + receipts.length + ')' }),
    receipts.length ? json(receipts) : el('p', { class: 'muted', text: 'No receipt at this step (receipts seal model turns and tool results). Verify checks them all.' })));
  box.replaceChildren(...parts);
}

// A file a message carries: an image shown inline, a PDF as a link. Fetched with the token
// (an <img src> cannot send it) from GET /api/runs/{id}/files/{digest}, which serves it with
// its media type.
function attachmentView(run, a) {
  const path = '/api/runs/' + encodeURIComponent(run) + '/files/' + a.digest;
  const label = (a.name || a.media_type) + ' (' + a.media_type + ', ' + a.size + ' bytes)';
  const box = el('div', { class: 'attachment' });
  const load = fetch(path, { headers: headers() })
    .then((r) => { if (!r.ok) throw new Error(r.statusText); return r.blob(); })
    .then((b) => URL.createObjectURL(b));
  if (a.media_type.startsWith('image/')) {
    const img = el('img', { alt: label, title: label, class: 'attachment-image' });
    load.then((url) => { img.src = url; }, () => { box.append(el('span', { class: 'muted', text: label + ': not readable' })); });
    box.append(img);
  } else {
    const link = el('a', { href: '#', text: label });
    load.then((url) => { link.href = url; link.target = '_blank'; }, () => { link.textContent = label + ': not readable'; });
    box.append(link);
  }
  return box;
}

function requestView(req, run) {
  const msgs = req.messages.map((m) => {
    const role = m.role || 'message';
    return el('div', { class: 'msg ' + role },
      el('div', { class: 'role', text: role + (m.tool_call_id ? ' · ' + m.tool_call_id : '') }),
      ...(m.reasoning || []).map((r) => el('details', {}, el('summary', { text: 'reasoning' }), json(r))),
      m.content ? el('pre', { text: m.content }) : null,
      ...(m.attachments || []).map((a) => attachmentView(run, a)),
      ...(m.tool_calls || []).map((c) => el('div', {}, el('b', { text: c.name }), json(c.arguments))));
  });
  return el('div', { class: 'panel', id: 'request' },
    el('h3', { text: 'Model request: ' + req.provider + '/' + req.model + ' (attempt ' + req.attempt + ')' }),
    el('div', { class: 'muted', text: req.messages.length + ' messages · tools: ' + (req.tools.map((t) => t.name).join(', ') || 'none') }),
    ...msgs,
    el('details', {}, el('summary', { text: 'the request as sent (JSON)' }), json(req)));
}

// ---- comparing two runs --------------------------------------------------------------------

async function comparePage(a, b) {
  const box = el('div', {});
  view().append(el('h1', {}, 'Compare ', el('a', { class: 'mono', href: '#/run/' + a, text: a }), ' and ', el('a', { class: 'mono', href: '#/run/' + b, text: b })), box);
  const summary = el('p', { id: 'diff-summary' });
  const sideBoxes = [0, 1].map((i) => el('div', { class: 'rows', id: 'side-' + i }));
  const status = [a, b].map(() => el('span', {}));
  const inspect = el('div', { class: 'compare', id: 'compare-steps' });
  box.append(summary, el('div', { class: 'compare' }, [a, b].map((r, i) => el('div', {},
    el('h2', { class: 'mono' }, r, ' ', status[i]), sideBoxes[i]))), inspect);
  let first = null;
  let shown = null;
  let stopped = false;
  onLeave(() => { stopped = true; });
  async function showPair(seq) {
    shown = seq;
    const steps = await Promise.all([a, b].map((r) => api('/api/runs/' + r + '/steps/' + seq).catch((e) => ({ error: e.message }))));
    inspect.replaceChildren(...steps.map((st) => {
      const p = el('div', { class: 'panel' });
      if (st.error) p.append(el('p', { class: 'muted', text: st.error }));
      else showStep(p, st, []);
      return p;
    }));
  }
  // Both branches are drawn from the step before they part; while either runs, the view
  // follows it.
  async function load() {
    let d;
    try { d = await api('/api/diff?a=' + encodeURIComponent(a) + '&b=' + encodeURIComponent(b)); } catch (e) { flash(e.message); return false; }
    first = d.first_difference ? d.first_difference.seq : null;
    summary.textContent = first === null
      ? 'The two runs are identical (' + d.common + ' steps).'
      : 'They share steps 1–' + d.common + ' and first differ at step ' + first + '.';
    const from = Math.max(1, (first || d.common) - 2);
    const [runs, sides] = await Promise.all([
      Promise.all([a, b].map((r) => api('/api/runs/' + r).catch(() => null))),
      Promise.all([a, b].map((r) => api('/api/runs/' + r + '/timeline?offset=' + (from - 1) + '&limit=500').catch(() => ({ entries: [] })))),
    ]);
    sides.forEach((side, i) => {
      if (runs[i]) status[i].replaceChildren(badge(runs[i]));
      sideBoxes[i].replaceChildren(...side.entries.map((e) => el('div', {
        class: 'row' + (e.seq === first ? ' differs' : ''), 'data-seq': e.seq,
        onclick: () => showPair(e.seq),
      }, el('span', { class: 'seq', text: e.seq }), el('span', { class: 'muted', text: clock(e.at_ms) }),
      el('span', { class: 'edge', text: e.from + ' → ' + e.to }), el('span', { class: 'sum', text: (e.agent ? e.agent + ': ' : '') + e.summary }), el('span', { class: 'muted', text: e.tokens ? e.tokens + ' tok' : '' }))));
    });
    if (first !== null && shown === null) showPair(first);
    return runs.some((r) => r && (r.status === 'running' && r.driven));
  }
  while (!stopped && await load()) {
    await new Promise((r) => setTimeout(r, 1500));
  }
}
