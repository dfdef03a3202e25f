// The topologies page: counts by run state and a filter, every deployed
// topology (failed first), its state and figures, refreshed every second
// with a chart of its last 15 minutes, all from one call whatever their
// number; and a form to deploy a bundle.

import { call, get, path, withQuery } from './api.js';
import { THROUGHPUT, TimeChart } from './chart.js';
import { el, figure, href, replace, submitForm } from './dom.js';
import { errorText } from './failure.js';

/** A badge for a run state (running, stopped, failed). */
export function stateBadge(state) {
  return el('span', { class: `badge ${state}`, 'data-state': state }, state);
}

/**
 * A status's figures as a definition list, each figure in an element named
 * by its class; the rates are the last second's, from `history`.
 */
export function figures(status, history, lagUnit = status.spout_lag_unit ?? null) {
  const ms = (v) => (v === null || v === undefined ? '–' : `${figure(v, 2)} ms`);
  const latest = (column, fallback) => (history?.[column]?.length ? history[column][history[column].length - 1] : fallback);
  const rows = [
    ['last committed txid', 'txid', figure(status.last_committed)],
    ['batches/s', 'batches-per-s', figure(latest('batches_per_s', status.batches_per_s), 2)],
    ['tuples/s', 'tuples-per-s', figure(latest('tuples_per_s', status.tuples_per_s), 0)],
    ['commit p50', 'commit-p50', ms(status.commit_p50_ms)],
    ['commit p99', 'commit-p99', ms(status.commit_p99_ms)],
    ['replays', 'replays', figure(status.replays)],
    [lagUnit ? `spout lag, ${lagUnit}` : 'spout lag', 'spout-lag', figure(status.spout_lag)],
  ];
  if (Object.keys(status.late_tuples ?? {}).length) {
    const late = Object.values(status.late_tuples).reduce((a, b) => a + b, 0);
    rows.push(['late tuples', 'late-tuples', figure(late)]);
  }
  return el('dl', { class: 'figures' }, rows.map(([label, name, value]) => el('div', {}, el('dt', {}, label), el('dd', { class: name }, value))));
}

/** A span of seconds, in its largest units: `3 h 4 min`, `5 min 6 s`, `7 s`. */
export function duration(seconds) {
  const s = Math.floor(seconds);
  if (s >= 3600) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  if (s >= 60) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${s} s`;
}

/** A moment (ms since the epoch) as its UTC date and time to the second. */
export function moment(ms) {
  return `${new Date(ms).toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}

/** The bundle's digest: its file's name is its SHA-256. */
export function digestOf(bundle) {
  return String(bundle ?? '').replace(/\.weir$/, '');
}

/** Where a deployment came from and how long it runs: deploy time, uptime, input, bundle digest. */
export function deployment(status) {
  const facts = status.deployment;
  if (!facts) return null;
  const digest = digestOf(facts.bundle);
  const parts = [
    facts.deployed_unix_ms ? el('span', { class: 'deployed' }, `deployed ${moment(facts.deployed_unix_ms)}`) : null,
    status.state === 'running' ? el('span', { class: 'uptime' }, `up ${duration(status.uptime_s ?? 0)}`) : null,
    facts.input ? el('span', { class: 'input' }, `input ${facts.input}`) : null,
    el('span', { class: 'digest', title: `bundle SHA-256 ${digest}` }, `bundle ${digest.slice(0, 12)}`),
    facts.upgrades?.length ? el('span', { class: 'upgrades' }, `${facts.upgrades.length} upgrade${facts.upgrades.length === 1 ? '' : 's'}`) : null,
  ].filter(Boolean);
  return el('p', { class: 'deployment quiet' }, parts.flatMap((p, i) => (i ? [' · ', p] : [p])));
}

/** One deployment's card, updated in place. */
class Card {
  constructor(name) {
    this.name = name;
    this.chart = new TimeChart(THROUGHPUT, { height: 130 });
    this.head = el('header');
    this.body = el('div', { class: 'body' });
    this.element = el('article', { class: 'topology', 'data-name': name }, this.head, this.body, this.chart.element);
  }

  update(status, history) {
    replace(
      this.head,
      el('h2', {}, el('a', { href: href('t', this.name), class: 'name' }, this.name)),
      stateBadge(status.state),
      status.topology !== this.name ? el('span', { class: 'quiet' }, `topology ${status.topology}`) : null,
    );
    replace(this.body, deployment(status), status.error ? errorText(status.error) : null, figures(status, history));
    if (history) this.chart.update(history);
  }
}

function deployForm(view, onDeployed) {
  const file = el('input', { type: 'file', name: 'bundle', id: 'deploy-bundle', accept: '.weir,.wasm', required: true });
  const name = el('input', { type: 'text', name: 'name', id: 'deploy-name', placeholder: "the topology's" });
  const topology = el('input', { type: 'text', name: 'topology', id: 'deploy-topology', placeholder: 'its only one' });
  const input = el('input', { type: 'text', name: 'input', id: 'deploy-input', placeholder: 'a path under an --input-dir' });
  const button = el('button', { type: 'submit' }, 'Deploy');
  const message = el('p', { class: 'message', role: 'status' });
  const form = submitForm(
    'deploy',
    async () => {
      const bundle = file.files[0];
      if (!bundle) return;
      button.disabled = true;
      replace(message, `Deploying ${bundle.name}…`);
      message.className = 'message';
      try {
        const url = withQuery(path('topologies'), { name: name.value, topology: topology.value, input: input.value });
        const status = await call('POST', url, bundle);
        replace(message, `Deployed ${status.name}.`);
        form.reset();
        onDeployed();
      } catch (error) {
        if (view.unauthorized(error)) return;
        message.className = 'message error';
        replace(message, error.message);
      } finally {
        button.disabled = false;
      }
    },
    el('h2', {}, 'Deploy a bundle'),
    el('div', { class: 'fields' },
      el('label', {}, 'Bundle', file),
      el('label', {}, 'Name', name),
      el('label', {}, 'Topology', topology),
      el('label', {}, 'Input', input),
      button),
    message,
  );
  return form;
}

/** Run states, failed first: the order of the counts and of the cards. */
const STATES = ['failed', 'stopped', 'running'];

/** Whether a topology's card is shown under `filter` (a run state, or all) and `search` (a part of its name). */
function shown(status, filter, search) {
  return (filter === 'all' || status.state === filter) && status.name.toLowerCase().includes(search.toLowerCase());
}

export async function render(view) {
  const list = el('div', { class: 'cards' });
  const cards = new Map();
  const counts = el('p', { class: 'counts', role: 'status' });
  const filter = el('select', { id: 'filter-state' },
    el('option', { value: 'all' }, 'all'), STATES.map((s) => el('option', { value: s }, s)));
  const search = el('input', { type: 'search', id: 'filter-name', placeholder: 'part of a name', autocomplete: 'off' });
  let last = [];
  const refresh = async () => {
    const all = await get(withQuery(path('topologies'), { history: 'true' }));
    if (view.closed) return;
    last = all;
    draw();
  };
  const draw = () => {
    const all = last;
    const by = Object.fromEntries(STATES.map((s) => [s, all.filter((t) => t.state === s).length]));
    replace(counts, `${all.length} topolog${all.length === 1 ? 'y' : 'ies'}: `,
      STATES.map((s, i) => [i ? ', ' : '', el('span', { class: `count ${s}`, 'data-state': s }, `${by[s]} ${s}`)]));
    // Failed first, then stopped, then running; by name within each.
    const ordered = all
      .filter((t) => shown(t, filter.value, search.value))
      .sort((a, b) => STATES.indexOf(a.state) - STATES.indexOf(b.state) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const histories = ordered.map((t) => t.history ?? null);
    const names = new Set(ordered.map((s) => s.name));
    for (const [name, card] of cards) {
      if (!names.has(name)) {
        card.element.remove();
        cards.delete(name);
      }
    }
    for (const [i, status] of ordered.entries()) {
      let card = cards.get(status.name);
      if (!card) {
        card = new Card(status.name);
        cards.set(status.name, card);
      }
      // In the API's order (by name), moved only when out of it.
      if (list.children[i] !== card.element) list.insertBefore(card.element, list.children[i] ?? null);
      card.update(status, histories[i]);
    }
    list.querySelector('.empty')?.remove();
    if (all.length === 0) list.append(el('p', { class: 'quiet empty' }, 'No topology is deployed: deploy a bundle below.'));
    else if (ordered.length === 0) list.append(el('p', { class: 'quiet empty' }, 'No topology matches the filter.'));
  };
  filter.addEventListener('change', draw);
  search.addEventListener('input', draw);
  const form = deployForm(view, () => view.attempt(refresh));
  replace(
    view.main,
    el('h1', {}, 'Topologies'),
    el('div', { class: 'overview' }, counts,
      el('div', { class: 'filters' },
        el('label', { for: 'filter-state' }, 'Run state', filter),
        el('label', { for: 'filter-name' }, 'Name', search))),
    list,
    form,
  );
  view.every(1000, refresh);
}
