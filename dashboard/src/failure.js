// Errors as an operator reads them: the headline first, at most a few
// lines under it, the rest (a guest's backtrace) folded away; each failed
// attempt with its time; and the operator a failure names.

import { el, figure } from './dom.js';

/** Lines an error shows before its fold. */
export const SHOWN_LINES = 8;

/** Where the detail of an error starts: its backtrace, or its line `limit`. */
function foldAt(lines, limit) {
  const trace = lines.findIndex((line, i) => i > 0 && /backtrace|^\s*\d+:\s/i.test(line));
  return Math.min(trace === -1 ? lines.length : trace, limit);
}

/**
 * `text` as a headline, the lines after it up to `limit` in all, and the
 * rest in a fold (closed) that says how many lines it holds.
 */
export function errorText(text, limit = SHOWN_LINES, className = 'error') {
  const lines = String(text).replace(/\s+$/, '').split('\n');
  const cut = Math.max(1, foldAt(lines, limit));
  const shown = lines.slice(0, cut);
  const folded = lines.slice(cut);
  return el(
    'div',
    { class: `${className} error-block` },
    el('p', { class: 'headline-text' }, shown[0]),
    shown.length > 1 ? el('pre', { class: 'more' }, shown.slice(1).join('\n')) : null,
    folded.length
      ? el('details', { class: 'fold' },
        el('summary', {}, `${folded.length} more line${folded.length === 1 ? '' : 's'} (backtrace)`),
        el('pre', {}, folded.join('\n')))
      : null,
  );
}

/** A time of day to the second, and its full date in the title. */
export function timeOf(ms) {
  if (!ms) return el('span', { class: 'quiet' }, '–');
  const at = new Date(ms);
  return el('time', { datetime: at.toISOString(), title: at.toISOString() }, at.toLocaleTimeString('en-GB'));
}

/** The operator a status's failure names: the latest attempt's, else its halting error's. */
export function failingOperator(status) {
  const named = status.failures?.find((f) => f.operator)?.operator;
  if (named) return named;
  const match = /^operator (\S+): /.exec(status.error ?? '');
  return match ? match[1] : null;
}

/** The failed attempts, most recent first, each with its time and its error folded. */
export function failuresTable(failures) {
  if (!failures?.length) return el('p', { class: 'quiet' }, 'No failed attempt since it started.');
  return el(
    'div',
    { class: 'table-scroll' },
    el(
      'table',
      { class: 'failures' },
      el('caption', { class: 'sr-only' }, 'Failed attempts, most recent first'),
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'txid'), el('th', { scope: 'col' }, 'attempt'), el('th', { scope: 'col' }, 'at'), el('th', { scope: 'col' }, 'operator'), el('th', { scope: 'col' }, 'error'))),
      el('tbody', {}, failures.map((f) => el('tr', {},
        el('td', { class: 'num txid' }, figure(f.txid)),
        el('td', { class: 'num attempt' }, figure(f.attempt)),
        el('td', { class: 'at' }, timeOf(f.at_ms)),
        el('td', { class: 'operator' }, f.operator ?? '–'),
        el('td', { class: 'error-text' }, errorText(f.error, 2, 'failure'))))),
    ),
  );
}
