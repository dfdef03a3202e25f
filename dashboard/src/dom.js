// Building the page. Every string given here becomes text (a text node or
// an attribute's value), never markup: what a guest, a bundle or a
// deployment's name holds is shown as it is and cannot add elements or
// run script.

const SVG = 'http://www.w3.org/2000/svg';

function build(node, props, children) {
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) {
      if (typeof value !== 'function') throw new TypeError(`${key} must be a function`);
      node.addEventListener(key.slice(2), value);
    } else if (key === 'href' && !/^#/.test(String(value))) {
      // Links go to the dashboard's own routes only.
      throw new TypeError(`refusing link ${value}`);
    } else {
      node.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(node, ...children);
  return node;
}

/** A link to one of the dashboard's routes: each part escaped whole. */
export function href(...parts) {
  return '#/' + parts.map((p) => encodeURIComponent(p)).join('/');
}

/** Appends each child: a node as it is, anything else as text. */
export function append(node, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** An HTML element. */
export function el(tag, props, ...children) {
  return build(document.createElement(tag), props, children);
}

/**
 * A form of class `className` whose submission runs `onSubmit` in place of
 * the browser's own (which would leave the page).
 */
export function submitForm(className, onSubmit, ...children) {
  const submit = (event) => {
    event.preventDefault();
    return onSubmit();
  };
  return el('form', { class: className, onsubmit: submit }, ...children);
}

/** An SVG element. */
export function svg(tag, props, ...children) {
  return build(document.createElementNS(SVG, tag), props, children);
}

/** Replaces what `node` holds with `children`. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, ...children);
}

/** A figure for a table: a number shown in a few digits, or a dash. */
export function figure(value, digits = 1) {
  if (value === undefined || value === null) return '–';
  if (typeof value !== 'number') return String(value);
  return Number.isInteger(value) ? value.toLocaleString('en-US') : value.toLocaleString('en-US', {
    maximumFractionDigits: digits,
  });
}

const COMPACT = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 1 });

/**
 * A figure short enough for a graph node's line: whole below 10,000, else
 * compact (12.3K, 4.5M); the exact figure stays in the node's data.
 */
export function shortFigure(value) {
  if (typeof value !== 'number' || Math.abs(value) < 10000) return figure(value, 0);
  return COMPACT.format(value);
}

/** Printable text: no control characters but tabs and line ends. */
const PRINTABLE = /^[^\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]*$/;

/** Hex groups (of four bytes) shown of a bytes value; the rest is said as a count. */
const HEX_GROUPS = 32;

/**
 * Bytes, as the API gives them (hex), as text: UTF-8 text quoted where
 * they are printable text, else their hex in groups of four bytes; each
 * with its size.
 */
export function bytesText(hex) {
  const pairs = String(hex).match(/[0-9a-f]{2}/gi) ?? [];
  const bytes = new Uint8Array(pairs.map((h) => parseInt(h, 16)));
  const size = `${bytes.length.toLocaleString('en-US')} byte${bytes.length === 1 ? '' : 's'}`;
  if (bytes.length === 0) return 'no bytes';
  try {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    if (PRINTABLE.test(text)) return `${JSON.stringify(text)} (${size}, UTF-8)`;
  } catch {
    // Not UTF-8: shown as hex.
  }
  const groups = pairs.join('').match(/.{1,8}/g);
  const more = groups.length > HEX_GROUPS ? ` … ${(bytes.length - HEX_GROUPS * 4).toLocaleString('en-US')} more` : '';
  return `${size}: ${groups.slice(0, HEX_GROUPS).join(' ')}${more}`;
}

/** Whether a value as the API gives it is bytes: `{"bytes": "<hex>"}`. */
const isBytes = (value) =>
  value !== null && typeof value === 'object' && Object.keys(value).length === 1 && typeof value.bytes === 'string';

/** A value as the API gives it, as text: strings as they are, bytes readably, the rest as JSON. */
export function valueText(value) {
  if (typeof value === 'string') return value;
  return isBytes(value) ? bytesText(value.bytes) : JSON.stringify(value);
}

/** Tuples decoded from a stored value (`{count, tuples}`, see the state API), as text. */
export function tuplesText({ count, tuples }) {
  const more = count > tuples.length ? ` … ${(count - tuples.length).toLocaleString('en-US')} more` : '';
  return `${count.toLocaleString('en-US')} tuple${count === 1 ? '' : 's'}: ${tuples.map((t) => JSON.stringify(t)).join(' ')}${more}`;
}

/** A key (a list of values) as text: a lone string as it is, else JSON. */
export function keyText(key) {
  return key.length === 1 && typeof key[0] === 'string' ? key[0] : JSON.stringify(key);
}
