// One topology: its state and figures, the actions on it, its stream
// graph, live charts, recent failures, its guests' logs as they come, and
// its states and queries.

import { ApiError, call, get, path, withQuery } from './api.js';
import { BATCHES, LATENCY, THROUGHPUT, TimeChart } from './chart.js';
import { el, figure, href, replace } from './dom.js';
import { errorText, failingOperator, failuresTable, timeOf } from './failure.js';
import { Graph } from './graph.js';
import { deployment, digestOf, figures, moment, stateBadge } from './topologies.js';

/** The states a definition writes (name and kind) and its queries' names. */
export function statesAndQueries(definition) {
  const states = new Map();
  const queries = [];
  for (const node of definition?.nodes ?? []) {
    const state = node.op.state;
    if (state && typeof state === 'object' && !states.has(state.name)) states.set(state.name, state.kind);
    if (node.op.op === 'query-stream') queries.push(node.op.name);
  }
  return { states, queries };
}

/** The topology's definition, or null (with the reason shown) when it is not loaded. */
export async function definitionOf(name, whyNot) {
  try {
    return await get(path('topologies', name, 'definition'));
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 400) throw error;
    replace(whyNot, error.message);
    return null;
  }
}

function actions(view, name, onDone) {
  const message = el('p', { class: 'message', role: 'status' });
  // `then` follows a change that went through: the page's refresh, unless
  // the change leaves the page.
  const act = async (what, work, then = onDone) => {
    busy = true;
    for (const button of element.querySelectorAll('button')) button.disabled = true;
    message.className = 'message';
    replace(message, `${what}…`);
    try {
      await work();
      replace(message, `${what}: done.`);
      await then();
    } catch (error) {
      if (view.unauthorized(error)) return;
      message.className = 'message error';
      replace(message, error.message);
    } finally {
      busy = false;
      for (const button of element.querySelectorAll('button')) button.disabled = false;
      update(lastState);
    }
  };
  const stop = el('button', { type: 'button', class: 'stop', onclick: () => act('Stopping', () => call('POST', path('topologies', name, 'stop'))) }, 'Stop');
  const resume = el('button', { type: 'button', class: 'resume', onclick: () => act('Resuming', () => call('POST', path('topologies', name, 'resume'))) }, 'Resume');
  const bundle = el('input', { type: 'file', class: 'upgrade-bundle', accept: '.weir,.wasm', 'aria-label': 'new bundle' });
  const upgrade = el('button', {
    type: 'button',
    class: 'upgrade',
    onclick: () => {
      const file = bundle.files[0];
      if (!file) {
        message.className = 'message error';
        replace(message, 'Choose the new bundle first.');
        return;
      }
      act('Upgrading', () => call('PUT', path('topologies', name, 'bundle'), file));
    },
  }, 'Upgrade');
  const keep = el('input', { type: 'radio', name: 'delete-state', value: 'keep', id: 'delete-keep' });
  const drop = el('input', { type: 'radio', name: 'delete-state', value: 'drop', id: 'delete-drop' });
  const confirmation = el('div', { class: 'confirm', hidden: true, role: 'alertdialog' });
  const ask = el('button', {
    type: 'button',
    class: 'delete',
    onclick: () => {
      const choice = keep.checked ? 'keep' : drop.checked ? 'drop' : null;
      if (!choice) {
        message.className = 'message error';
        replace(message, 'Say what becomes of its state first: keep it or drop it.');
        return;
      }
      const doomed = choice === 'drop' ? 'and drop its state for good' : 'and keep its state';
      replace(
        confirmation,
        el('p', {}, `Delete ${name} ${doomed}?`),
        el('button', {
          type: 'button',
          class: 'confirm-delete danger',
          onclick: () => {
            confirmation.hidden = true;
            act(
              'Deleting',
              () => call('DELETE', withQuery(path('topologies', name), { state: choice })),
              () => {
                location.hash = '#/';
              },
            );
          },
        }, 'Yes, delete it'),
        el('button', { type: 'button', class: 'cancel', onclick: () => { confirmation.hidden = true; } }, 'Cancel'),
      );
      confirmation.hidden = false;
    },
  }, 'Delete…');
  let lastState = null;
  // While a change is at work its buttons stay off, whatever a refresh says.
  let busy = false;
  const update = (state) => {
    lastState = state;
    if (busy) return;
    stop.disabled = state !== 'running';
    resume.disabled = state === 'running';
  };
  const element = el(
    'section',
    { class: 'actions' },
    stop,
    resume,
    el('span', { class: 'group' }, bundle, upgrade),
    el('span', { class: 'group' },
      el('label', { for: 'delete-keep' }, keep, ' keep state'),
      el('label', { for: 'delete-drop' }, drop, ' drop state'),
      ask),
    confirmation,
    message,
  );
  return { element, update };
}

/** The deployment's upgrades, the latest first. */
function upgradesList(status) {
  const all = status.deployment?.upgrades ?? [];
  if (!all.length) return el('p', { class: 'quiet' }, 'Not upgraded since it was deployed.');
  return el('ol', { class: 'upgrade-history plain' }, [...all].reverse().map((u) => el('li', {},
    `${moment(u.at_unix_ms)}: bundle ${digestOf(u.from).slice(0, 12)} → ${digestOf(u.to).slice(0, 12)}`)));
}

/** The unit a spout's lag is counted in. */
export function lagUnit(definition) {
  const kind = definition?.nodes?.find((n) => n.op.op === 'spout')?.op.spout?.kind ?? '';
  if (kind.includes('jetstream') || kind.includes('kafka')) return 'messages';
  if (kind.endsWith('lines')) return 'bytes';
  if (kind === 'generator') return 'integers';
  return null;
}

/** The guests' log lines that pass `filter` (operator, stream, text searched for). */
function logLines(lines, filter) {
  if (!lines.length) return [el('li', { class: 'quiet' }, 'Its guests have written nothing.')];
  const needle = filter.text.toLowerCase();
  const kept = lines.filter((l) => (!filter.operator || l.operator === filter.operator)
    && (!filter.stream || l.stream === filter.stream)
    && (!needle || l.line.toLowerCase().includes(needle)));
  if (!kept.length) return [el('li', { class: 'quiet' }, 'No line matches the filter.')];
  return kept.map((l) => el('li', { class: l.stream },
    el('span', { class: 'at' }, l.at_ms ? timeOf(l.at_ms) : ''),
    el('span', { class: 'op' }, `[${l.operator}]`),
    el('span', { class: 'stream' }, l.stream),
    el('span', { class: 'line' }, l.line)));
}

export async function render(view, { name }) {
  const headline = el('div', { class: 'headline' });
  const figuresBox = el('div');
  const whyNoGraph = el('p', { class: 'error' });
  const definition = await definitionOf(name, whyNoGraph);
  const graph = definition ? new Graph(definition, name) : null;
  const throughput = new TimeChart(THROUGHPUT, { title: 'Tuples a second' });
  const batches = new TimeChart(BATCHES, { title: 'Batches a second' });
  const latency = new TimeChart(LATENCY, { title: 'Commit latency, each second' });
  const unit = lagUnit(definition);
  const failures = el('div', { class: 'failures-box' });
  const upgrades = el('div', { class: 'upgrades-box' });
  // Scrolled by keyboard too: it can be focused.
  const logs = el('ol', { class: 'logs', reversed: true, tabindex: 0, 'aria-label': "the guests' log lines, the latest first" });
  const follow = el('input', { type: 'checkbox', checked: true, id: 'follow' });
  const byOperator = el('select', { id: 'log-operator' }, el('option', { value: '' }, 'every operator'),
    (definition?.nodes ?? []).filter((n) => n.op.op !== 'spout').map((n) => el('option', { value: n.id }, n.id)));
  const byStream = el('select', { id: 'log-stream' }, ['', 'stdout', 'stderr'].map((v) => el('option', { value: v }, v || 'both streams')));
  const search = el('input', { type: 'search', id: 'log-search', placeholder: 'text in a line', autocomplete: 'off' });
  let lastLines = [];
  const drawLogs = () => replace(logs, logLines(lastLines, { operator: byOperator.value, stream: byStream.value, text: search.value }));
  for (const control of [byOperator, byStream]) control.addEventListener('change', drawLogs);
  search.addEventListener('input', drawLogs);
  const { states, queries } = statesAndQueries(definition);
  const refresh = async () => {
    const [status, history] = await Promise.all([get(path('topologies', name)), get(path('topologies', name, 'history'))]);
    if (view.closed) return;
    replace(headline, el('h1', {}, name), stateBadge(status.state), status.topology !== name ? el('span', { class: 'quiet' }, `topology ${status.topology}`) : null);
    replace(figuresBox, deployment(status), status.error ? errorText(status.error, 8, 'error status-error') : null, figures(status, history, status.spout_lag_unit ?? unit));
    replace(upgrades, upgradesList(status));
    act.update(status.state);
    graph?.update(status, history);
    graph?.markFailing(status.state === 'failed' ? failingOperator(status) : null);
    throughput.update(history);
    batches.update(history);
    latency.update(history);
    replace(failures, failuresTable(status.failures));
  };
  const act = actions(view, name, refresh);
  replace(
    view.main,
    headline,
    figuresBox,
    act.element,
    el('section', { class: 'graph-box' }, el('h2', {}, 'Stream graph'), graph ? graph.element : whyNoGraph),
    el('section', { class: 'charts' }, el('h2', { class: 'sr-only' }, 'Charts'), throughput.element, batches.element, latency.element),
    el('section', {}, el('h2', {}, 'Recent failures'), failures),
    el('section', {}, el('h2', {}, 'Upgrades'), upgrades),
    el('section', { class: 'states' },
      el('h2', {}, 'States and queries'),
      el('ul', {},
        [...states].map(([state, kind]) => el('li', {}, el('a', { href: href('t', name, 'state', state), class: 'state-link' }, `state ${state}`), ` (${kind})`)),
        queries.map((q) => el('li', {}, el('a', { href: href('t', name, 'query', q), class: 'query-link' }, `query ${q}`))))),
    el('section', { class: 'logs-box' },
      el('h2', {}, "Guests' logs"),
      el('div', { class: 'log-tools' },
        el('label', { class: 'follow', for: 'follow' }, follow, ' follow'),
        el('label', { for: 'log-operator' }, 'Operator', byOperator),
        el('label', { for: 'log-stream' }, 'Stream', byStream),
        el('label', { for: 'log-search' }, 'Search', search)),
      logs),
  );
  view.every(1000, refresh);
  view.every(1000, async () => {
    if (!follow.checked) return;
    const lines = await get(path('topologies', name, 'logs'));
    if (view.closed) return;
    lastLines = lines;
    drawLogs();
  });
}
