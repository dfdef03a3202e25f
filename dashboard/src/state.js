// The state browser: a state's keys in order, a page at a time (GET
// .../states/STATE?after=KEY&limit=N, a range scan on the server), one
// key looked up, each with its stored txid (and prev, for opaque state).

import { ApiError, get, path, withQuery } from './api.js';
import { el, keyText, replace, valueText } from './dom.js';
import { definitionOf, statesAndQueries } from './topology.js';

const SIZES = [25, 100, 500];

function entryRow(entry, opaque) {
  return el(
    'tr',
    {},
    el('td', { class: 'key' }, keyText(entry.key)),
    el('td', { class: 'value num' }, valueText(entry.value)),
    el('td', { class: 'txid num' }, entry.txid ?? '–'),
    opaque ? el('td', { class: 'prev num' }, entry.prev === undefined ? '–' : valueText(entry.prev)) : null,
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
  const lookup = el(
    'form',
    {
      class: 'lookup',
      onsubmit: async (event) => {
        event.preventDefault();
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

  const pages = el('section', { class: 'pages' },
    el('nav', { class: 'pager', 'aria-label': 'pages of keys' }, first, previous, next, range, size),
    el('div', { class: 'table-scroll' }, el('table', { class: 'entries' }, el('caption', { class: 'sr-only' }, `Keys of state ${state}, in order`), head(), body)));
  replace(
    view.main,
    el('h1', {}, `State ${state}`, kind ? el('span', { class: 'quiet' }, ` ${kind}, of ${name}`) : null),
    definition ? null : whyNot,
    lookup,
    pages,
  );
  try {
    await load();
  } catch (error) {
    // No such state (or topology): no keys to page through, only why.
    if (!(error instanceof ApiError) || error.status !== 404) throw error;
    lookup.remove();
    replace(pages, el('p', { class: 'error' }, error.message));
  }
}
