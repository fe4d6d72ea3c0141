// The runtape page's experiments: the reports `runtape eval` wrote (GET /api/experiments),
// and one experiment's variants compared, per variant and per item side by side, each answer
// linked to its run. Loaded after app.js, whose helpers (el, api, view, usd, flash) it uses;
// app.js's router calls experimentsPage for #/experiments and #/experiments/ID.
'use strict';

function experimentTable(heads, rows, label) {
  return el('table', { class: 'runs', 'aria-label': label },
    el('thead', {}, el('tr', {}, heads.map((h) => el('th', { scope: 'col', text: h })))),
    el('tbody', {}, rows.map((cells) => el('tr', {}, cells.map((c) => el('td', {}, c))))));
}

const score2 = (x) => (typeof x === 'number' ? x.toFixed(2) : '–');

async function experimentsPage(id) {
  if (id) return experimentPage(id);
  const box = el('div', { id: 'experiments' });
  view().append(el('div', { class: 'toolbar' }, el('h1', { text: 'Experiments' })), box);
  try {
    const data = await api('/api/experiments');
    if (!data.experiments.length) {
      box.append(el('p', { class: 'muted', text: 'No experiments: `runtape eval SPEC --dataset FILE.jsonl` writes a report into the directory this server reads (--experiments).' }));
      return;
    }
    box.append(experimentTable(['experiment', 'dataset', 'items', 'variants (score)', 'scorers'],
      data.experiments.map((x) => [
        el('a', { class: 'mono', href: '#/experiments/' + encodeURIComponent(x.experiment), text: x.experiment }),
        x.dataset, String(x.items),
        x.variants.map((v) => v.name + ' ' + score2(v.score)).join(' · '),
        x.scorers.join(', '),
      ]), 'experiments'));
  } catch (e) { if (e.status !== 401) flash(e.message); }
}

async function experimentPage(id) {
  const box = el('div', { id: 'experiment' });
  view().append(el('h1', {}, 'Experiment ', el('span', { class: 'mono', text: id })), box);
  let r;
  try { r = await api('/api/experiments/' + encodeURIComponent(id)); } catch (e) {
    if (e.status !== 401) flash(e.message);
    return;
  }
  const scorers = r.scorers.map((s) => s.name);
  box.append(el('p', { class: 'muted', text: 'dataset ' + r.dataset + ' · ' + r.items.length + ' items · scorers ' + scorers.join(', ') }));
  box.append(el('section', { class: 'panel' }, el('h2', { text: 'Variants' }),
    experimentTable(['variant', 'spec', 'score', ...scorers, 'completed', 'cost', 'tokens', 'latency (mean)'],
      r.variants.map((v) => [el('strong', { text: v.name }), el('span', { class: 'mono', text: v.spec }), score2(v.score),
        ...scorers.map((s) => score2(v.scores[s])), v.completed + '/' + v.items, usd(v.cost_nanos), String(v.tokens),
        v.latency_ms_mean + ' ms']), 'variants')));
  const names = r.variants.map((v) => v.name);
  const cell = (res) => {
    if (!res) return el('span', { class: 'muted', text: 'not run' });
    const notes = Object.entries(res.scores).map(([k, s]) => k + ' ' + score2(s.score) + (s.note ? ' (' + s.note + ')' : ''));
    return el('div', { class: 'experiment-result' },
      el('div', {}, el('strong', { text: score2(res.score) }), ' ',
        el('a', { class: 'mono', href: res.ui, text: res.run }), ' ', el('span', { class: 'muted', text: res.status })),
      el('div', { class: 'reason', text: res.answer !== undefined && res.answer !== null ? res.answer : (res.reason || '(no answer)') }),
      el('div', { class: 'muted', text: notes.join(' · ') }));
  };
  box.append(el('section', { class: 'panel' }, el('h2', { text: 'Items side by side' }),
    experimentTable(['item', 'goal', 'expected', ...names],
      r.items.map((it) => [it.id, el('span', { class: 'reason', text: it.goal }),
        el('span', { class: 'reason', text: it.expected === undefined ? '' : (typeof it.expected === 'string' ? it.expected : JSON.stringify(it.expected)) }),
        ...names.map((n) => cell(it.results[n]))]), 'items')));
}
