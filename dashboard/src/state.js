// The state browser: a state's keys in order, a page at a time (GET
// .../states/STATE?after=KEY&limit=N, a range scan on the server), one
// key looked up, each with its stored txid (and prev, for opaque state);
// and of the whole state (GET .../summary): its key count, its top keys by
// value, and the keys that start with a prefix. Times in keys (epoch
// milliseconds, as windows key by) are shown as dates too; bytes as text
// or grouped hex, and bytes holding tuples (a window's kept tuples) as
// those tuples, decoded by the server.

import { ApiError, get, path, withQuery } from './api.js';
import { el, keyText, replace, submitForm, tuplesText, valueText } from './dom.js';
import { definitionOf, statesAndQueries } from './topology.js';

const SIZES = [25, 100, 500];

/** Top keys a summary shows. */
const TOP = 10;

/** Milliseconds since the epoch between 2001 and 2286: what a window's key holds. */
const isEpochMs = (v) => Number.isInteger(v) && v >= 1e12 && v < 1e13;

/** A key's times (epoch ms) as UTC dates, or nothing. */
function keyTimes(key) {
  const times = key.filter(isEpochMs).map((ms) => new Date(ms).toISOString().replace('T', ' ').replace('Z', ' UTC'));
  return times.length ? el('span', { class: 'key-times quiet' }, times.join(' – ')) : null;
}

function entryRow(entry, opaque) {
  return el(
    'tr',
    {},
    el('td', { class: 'key' }, keyText(entry.key), keyTimes(entry.key)),
    el('td', { class: 'value num' }, entry.value_tuples ? tuplesText(entry.value_tuples) : valueText(entry.value)),
    el('td', { class: 'txid num' }, entry.txid ?? '–'),
    opaque
      ? el('td', { class: 'prev num' }, entry.prev === undefined || entry.prev === null ? '–' : entry.prev_tuples ? tuplesText(entry.prev_tuples) : valueText(entry.prev))
      : null,
  );
}

/** What the lookup field holds, as a key: a JSON array, or else one string. */
function parseKey(text) {
  const trimmed = text.trim();
  if (!trimmed.startsWith('[')) return [text];
  const key = JSON.parse(trimmed);
  if (!Array.isArray(key)) throw new SyntaxError('a key is a JSON array of its values');
  return key;
}

export async function render(view, { name, state }) {
  const whyNot = el('p', { class: 'error' });
  const definition = await definitionOf(name, whyNot);
  const kind = statesAndQueries(definition).states.get(state);
  const opaque = kind === 'opaque';
  const url = path('topologies', name, 'states', state);

  const keyInput = el('input', { type: 'text', id: 'lookup-key', placeholder: 'w1, or a key as JSON: ["w1"]', required: true });
  const found = el('div', { class: 'found', role: 'status' });
  const lookup = submitForm(
    'lookup',
    async () => {
      let key;
      try {
        key = parseKey(keyInput.value);
      } catch (error) {
        replace(found, el('p', { class: 'error' }, `Not a key: ${error.message}`));
        return;
      }
      try {
        const entry = await get(withQuery(url, { key: JSON.stringify(key), raw: 'true' }));
        replace(found, el('div', { class: 'table-scroll' }, el('table', { class: 'entries one' }, head(), el('tbody', {}, entryRow(entry, opaque)))));
      } catch (error) {
        if (view.unauthorized(error)) return;
        replace(found, el('p', { class: 'error' }, error.message));
      }
    },
    el('label', { for: 'lookup-key' }, 'Look up a key'),
    keyInput,
    el('button', { type: 'submit' }, 'Look up'),
    found,
  );

  const head = () => el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'key'), el('th', { scope: 'col' }, 'value'), el('th', { scope: 'col' }, 'txid'), opaque ? el('th', { scope: 'col' }, 'prev') : null));
  const body = el('tbody');
  const range = el('span', { class: 'range' });
  const size = el('select', { id: 'page-size', 'aria-label': 'keys a page' }, SIZES.map((n) => el('option', { value: n, selected: n === 100 }, `${n} a page`)));
  const first = el('button', { type: 'button', class: 'first' }, 'First');
  const previous = el('button', { type: 'button', class: 'previous' }, 'Previous');
  const next = el('button', { type: 'button', class: 'next' }, 'Next');
  // Where each page shown so far began: the key before it (null: the first).
  let starts = [null];
  let last = null;
  const load = async () => {
    const limit = Number(size.value);
    const after = starts[starts.length - 1];
    const entries = await get(withQuery(url, { after: after === null ? null : JSON.stringify(after), limit, raw: 'true' }));
    if (view.closed) return;
    replace(body, entries.length ? entries.map((e) => entryRow(e, opaque)) : el('tr', {}, el('td', { colspan: 4, class: 'quiet' }, 'No more keys.')));
    const from = (starts.length - 1) * limit + 1;
    replace(range, entries.length ? `keys ${from}–${from + entries.length - 1}` : 'no keys here');
    last = entries.length ? entries[entries.length - 1].key : null;
    next.disabled = entries.length < limit;
    previous.disabled = starts.length === 1;
    first.disabled = starts.length === 1;
  };
  const go = (change) => async () => {
    change();
    await view.attempt(load);
  };
  first.addEventListener('click', go(() => { starts = [null]; }));
  previous.addEventListener('click', go(() => { if (starts.length > 1) starts.pop(); }));
  next.addEventListener('click', go(() => { if (last !== null) starts.push(last); }));
  size.addEventListener('change', go(() => { starts = [null]; }));

  // The whole state: its count, its top keys, the keys of a prefix.
  const count = el('p', { class: 'key-count', role: 'status' }, 'Counting its keys…');
  const topBody = el('tbody');
  const prefixInput = el('input', { type: 'search', id: 'prefix', placeholder: 'w1', autocomplete: 'off' });
  const prefixFound = el('div', { class: 'prefix-found' });
  const auto = el('input', { type: 'checkbox', id: 'auto-refresh' });
  let prefix = '';
  const summarize = async () => {
    const summary = await get(withQuery(`${url}/summary`, { top: TOP, prefix: prefix || null, limit: 100 }));
    if (view.closed) return;
    replace(count, `${summary.keys.toLocaleString('en-US')}${summary.complete ? '' : '+'} keys`);
    count.dataset.keys = summary.keys;
    replace(topBody, summary.top.length ? summary.top.map((e) => entryRow(e, opaque)) : el('tr', {}, el('td', { colspan: 4, class: 'quiet' }, 'No key holds a number.')));
    replace(prefixFound, prefix
      ? (summary.prefix.length
        ? el('div', { class: 'table-scroll' }, el('table', { class: 'prefixed' }, el('caption', { class: 'sr-only' }, `Keys starting with ${prefix}`), head(), el('tbody', {}, summary.prefix.map((e) => entryRow(e, opaque)))))
        : el('p', { class: 'quiet' }, `No key starts with ${prefix}.`))
      : null);
  };
  const prefixForm = el('form', {
    class: 'prefix-form',
    onsubmit: async (event) => {
      event.preventDefault();
      prefix = prefixInput.value;
      await view.attempt(summarize);
    },
  }, el('label', { for: 'prefix' }, 'Keys starting with'), prefixInput, el('button', { type: 'submit' }, 'Find'));
  const whole = el('section', { class: 'summary' },
    el('h2', {}, 'The whole state'),
    count,
    el('label', { class: 'follow', for: 'auto-refresh' }, auto, ' refresh every 2 seconds'),
    el('h3', {}, `Top ${TOP} keys by value`),
    el('div', { class: 'table-scroll' }, el('table', { class: 'top' }, el('caption', { class: 'sr-only' }, 'Keys with the highest values'), head(), topBody)),
    prefixForm,
    prefixFound);
  const pages = el('section', { class: 'pages' },
    el('nav', { class: 'pager', 'aria-label': 'pages of keys' }, first, previous, next, range, size),
    el('div', { class: 'table-scroll' }, el('table', { class: 'entries' }, el('caption', { class: 'sr-only' }, `Keys of state ${state}, in order`), head(), body)));
  replace(
    view.main,
    el('h1', {}, `State ${state}`, kind ? el('span', { class: 'quiet' }, ` ${kind}, of ${name}`) : null),
    definition ? null : whyNot,
    lookup,
    whole,
    pages,
  );
  try {
    await load();
  } catch (error) {
    // No such state (or topology): no keys to page through, only why.
    if (!(error instanceof ApiError) || error.status !== 404) throw error;
    lookup.remove();
    whole.remove();
    replace(pages, el('p', { class: 'error' }, error.message));
    return;
  }
  // A topology of a cluster has no summary: its keys are read in pages.
  const summarized = await summarize().then(() => true, (error) => {
    if (!(error instanceof ApiError) || error.status !== 400) throw error;
    replace(whole, el('p', { class: 'quiet' }, error.message));
    return false;
  });
  view.every(2000, async () => {
    if (!auto.checked) return;
    await load();
    if (summarized) await summarize();
  });
}
