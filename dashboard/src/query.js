// The query console: pick one of a topology's queries, type its arguments,
// see the result tuples (POST .../queries/QUERY, as `weir query` asks).

import { call, get, path } from './api.js';
import { el, href, replace, submitForm, valueText } from './dom.js';
import { definitionOf, statesAndQueries } from './topology.js';

/** The names of a query's result fields, or null where the server does not tell them. */
async function fieldsOf(name, query) {
  try {
    return (await get(path('topologies', name, 'queries', query))).fields;
  } catch {
    return null;
  }
}

function results(rows, fields) {
  if (!rows.length) return el('p', { class: 'quiet' }, 'No tuples.');
  const width = Math.max(...rows.map((r) => r.length));
  return el(
    'table',
    { class: 'results' },
    el('thead', {}, el('tr', {}, Array.from({ length: width }, (_, i) => el('th', { scope: 'col' }, fields?.[i] ?? `field ${i + 1}`)))),
    el('tbody', {}, rows.map((row) => el('tr', {}, row.map((v) => el('td', {}, valueText(v)))))),
  );
}

export async function render(view, { name, query }) {
  const whyNot = el('p', { class: 'error' });
  const definition = await definitionOf(name, whyNot);
  const { queries } = statesAndQueries(definition);
  const pick = el('select', { id: 'query-name' }, queries.map((q) => el('option', { value: q, selected: q === query }, q)));
  const args = el('input', { type: 'text', id: 'query-args', placeholder: 'its arguments, as text', autocomplete: 'off', 'aria-describedby': 'query-hint' });
  const run = el('button', { type: 'submit' }, 'Run');
  const answer = el('section', { class: 'answer', role: 'status', hidden: true });
  const form = submitForm(
    'console',
    async () => {
      if (!pick.value) return;
      run.disabled = true;
      answer.hidden = false;
      replace(answer, el('p', { class: 'quiet' }, 'Running…'));
      try {
        const started = performance.now();
        const rows = await call('POST', path('topologies', name, 'queries', pick.value), args.value);
        const took = performance.now() - started;
        const fields = await fieldsOf(name, pick.value);
        replace(
          answer,
          el('h2', {}, `${rows.length === 1 ? '1 tuple' : `${rows.length} tuples`}`),
          el('p', { class: 'quiet took' }, `Answered in ${took < 10 ? took.toFixed(1) : Math.round(took)} ms.`),
          el('div', { class: 'table-scroll' }, results(rows, fields)),
          el('h3', { class: 'as-json' }, 'As JSON'),
          el('pre', { class: 'json' }, JSON.stringify(rows)),
        );
      } catch (error) {
        if (view.unauthorized(error)) return;
        replace(answer, el('p', { class: 'error' }, error.message));
      } finally {
        run.disabled = false;
      }
    },
    el('label', { for: 'query-name' }, 'Query'),
    pick,
    el('label', { for: 'query-args' }, 'Arguments'),
    args,
    el('p', { class: 'quiet hint', id: 'query-hint' }, 'The arguments go to the query as one text, as `weir query --args` sends them; its functions read them (a word count\'s, say, as words split by spaces).'),
    run,
  );
  pick.addEventListener('change', () => {
    history.replaceState(null, '', href('t', name, 'query', pick.value));
  });
  replace(
    view.main,
    el('h1', {}, `Query console`, el('span', { class: 'quiet' }, ` of ${name}`)),
    definition ? null : whyNot,
    queries.length ? form : el('p', { class: 'quiet' }, `Topology ${name} has no query.`),
    answer,
  );
  args.focus();
}
