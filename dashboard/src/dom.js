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

/** A value as the API gives it, as text: strings as they are, the rest as JSON. */
export function valueText(value) {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** A key (a list of values) as text: a lone string as it is, else JSON. */
export function keyText(key) {
  return key.length === 1 && typeof key[0] === 'string' ? key[0] : JSON.stringify(key);
}
