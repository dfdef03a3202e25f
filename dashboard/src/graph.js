// A topology's stream graph, drawn in SVG from its definition (GET
// .../definition, what `weir inspect --json` shows): a box per node with
// its name, kind, parallelism and the time it spends per batch, a box per
// state, and arrows for the tuples' way. A state's box opens it in the
// state browser, a query's node the console; every node is reached by
// keyboard. The graph fits its panel, or shows at full size, panned by
// scrolling its panel.

import { el, figure, href, shortFigure, svg } from './dom.js';

const W = 190;
const H = 102;
const GAP_X = 54;
const GAP_Y = 22;
const PAD = 12;
const NAME_CHARS = 24;

/** What a node does, as `weir inspect` names its kind. */
function kindOf(op) {
  if (op.op === 'aggregate' && op.scope === 'partition') return 'partition-aggregate';
  if (op.op === 'extreme') return op.max ? 'max' : 'min';
  return op.op;
}

/** A short line on what a node does. */
function detailOf(op) {
  const list = (fields) => `[${(fields ?? []).join(', ')}]`;
  switch (op.op) {
    case 'spout':
      return op.spout?.kind ?? '';
    case 'query-stream':
      return `query ${op.name}`;
    case 'partition':
      return op.by?.kind === 'fields' ? `by ${list(op.by.fields)}` : (op.by?.kind ?? '');
    case 'persistent-aggregate':
      return `${op.group?.length ? `group by ${list(op.group)} ` : ''}into ${op.state?.name}`;
    case 'partition-persist':
      return `into ${op.state?.name}`;
    case 'state-query':
      return `reads ${op.state}`;
    case 'window':
      return windowOf(op.window);
    default:
      return op.input ? `${list(op.input)} → ${list(op.output)}` : '';
  }
}

/** A span of milliseconds, in the largest unit that divides it. */
function span(ms) {
  for (const [unit, size] of [['h', 3600000], ['min', 60000], ['s', 1000]]) {
    if (ms >= size && ms % size === 0) return `${ms / size} ${unit}`;
  }
  return `${ms} ms`;
}

/** A window's kind and size. */
function windowOf(window) {
  switch (window?.kind) {
    case 'count':
      return window.slide && window.slide !== window.size ? `count ${window.size}, slide ${window.slide}` : `count ${window.size}`;
    case 'duration':
      return `time ${span(window.size_ms)}${window.slide_ms && window.slide_ms !== window.size_ms ? `, slide ${span(window.slide_ms)}` : ''}`;
    case 'event-time':
      return `event time ${span(window.size_ms)}${window.slide_ms && window.slide_ms !== window.size_ms ? `, slide ${span(window.slide_ms)}` : ''}`;
    case 'session':
      return `session, gap ${span(window.gap_ms)}`;
    default:
      return window?.kind ?? '';
  }
}

/** A watermark (ms since the epoch) as a time of day in UTC, to the millisecond. */
function watermarkText(ms) {
  return new Date(ms).toISOString().slice(11, 23);
}

function cut(text, chars) {
  return text.length > chars ? `${text.slice(0, chars - 1)}…` : text;
}

/** The boxes and arrows of `definition`, placed in columns by depth. */
export function layout(definition) {
  const boxes = [];
  const edges = [];
  const taken = new Set();
  let lanes = 0;
  const place = (box, column, lane) => {
    while (taken.has(`${column}/${lane}`)) lane += 1;
    taken.add(`${column}/${lane}`);
    lanes = Math.max(lanes, lane + 1);
    Object.assign(box, { column, lane });
    boxes.push(box);
    return box;
  };
  const states = new Map();
  const placed = [];
  // Nodes come after their inputs, so one pass places them all.
  for (const [index, node] of definition.nodes.entries()) {
    const inputs = (node.inputs ?? []).map((i) => placed[i]).filter(Boolean);
    const column = inputs.length ? Math.max(...inputs.map((b) => b.column)) + 1 : 0;
    const lane = inputs.length ? inputs[0].lane : lanes;
    const box = place(
      {
        index,
        id: node.id,
        kind: kindOf(node.op),
        parallelism: node.parallelism ?? 1,
        detail: detailOf(node.op),
        state: false,
        // Nodes of a query stream run for each query, not for each batch.
        query: node.op.op === 'query-stream' || inputs.some((b) => b.query),
      },
      column,
      lane,
    );
    placed[index] = box;
    for (const input of inputs) edges.push({ from: input, to: box, reads: false });
    const written = node.op.state && typeof node.op.state === 'object' ? node.op.state : null;
    if (written && !states.has(written.name)) {
      const stateBox = place(
        { id: written.name, kind: 'state', parallelism: 1, detail: written.kind, state: true, query: false },
        column + 1,
        box.lane,
      );
      states.set(written.name, stateBox);
    }
    if (written) edges.push({ from: box, to: states.get(written.name), reads: false });
  }
  // A query reads a state from wherever it stands.
  for (const box of placed) {
    const op = definition.nodes[box.index].op;
    if (op.op === 'state-query' && states.has(op.state)) edges.push({ from: states.get(op.state), to: box, reads: true });
  }
  const columns = Math.max(0, ...boxes.map((b) => b.column)) + 1;
  return { boxes, edges, width: PAD * 2 + columns * W + (columns - 1) * GAP_X, height: PAD * 2 + lanes * (H + GAP_Y) - GAP_Y };
}

const x = (box) => PAD + box.column * (W + GAP_X);
const y = (box) => PAD + box.lane * (H + GAP_Y);

/** The drawn graph: `element`, and `update(status)` for each node's time per batch. */
export class Graph {
  constructor(definition, name) {
    const { boxes, edges, width, height } = layout(definition);
    this.times = new Map();
    this.rates = new Map();
    this.windows = new Set(definition.nodes.filter((n) => n.op.op === 'window').map((n) => n.id));
    const arrows = edges.map(({ from, to, reads }) => {
      let d;
      if (reads) {
        // From the state's foot to the reader's head, through the gaps
        // between lanes and columns only, so as to cross no other node.
        const [x1, y1] = [x(from) + W / 2, y(from) + H];
        const [x2, y2] = [x(to) + W / 2, y(to)];
        if (from.column === to.column && to.lane === from.lane + 1) {
          d = `M${x1},${y1} V${y2}`;
        } else {
          const below = y1 + GAP_Y / 2;
          const aside = Math.max(PAD / 2, x(to) - GAP_X / 2);
          const above = y2 - GAP_Y / 2;
          d = `M${x1},${y1} V${below} H${aside} V${above} H${x2} V${y2}`;
        }
      } else {
        const [x1, y1] = [x(from) + W, y(from) + H / 2];
        const [x2, y2] = [x(to), y(to) + H / 2];
        const bend = Math.max(Math.abs(x2 - x1) / 2, 30);
        d = `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`;
      }
      return svg('path', { class: reads ? 'edge reads' : 'edge', d, 'marker-end': 'url(#arrow)' });
    });
    // Labels over the edges between columns: tuples a second along each.
    // (None into a state: what a node writes there is keys, not tuples.)
    this.edgeLabels = edges.filter(({ from, to, reads }) => !reads && !from.state && !to.state && !from.query).map(({ from, to }) => {
      const [x1, y1] = [x(from) + W, y(from) + H / 2];
      const [x2, y2] = [x(to), y(to) + H / 2];
      const label = svg('text', { class: 'edge-label', x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 6, 'text-anchor': 'middle' });
      return { from: from.id, label };
    });
    this.nodes = new Map();
    const nodes = boxes.map((box) => {
      const time = svg('text', { class: 'time', x: 10, y: 74 }, box.query ? 'runs per query' : '');
      const rates = svg('text', { class: 'rates', x: 10, y: 92 });
      if (!box.state && !box.query) {
        this.times.set(box.id, time);
        this.rates.set(box.id, rates);
      }
      const op = box.state ? null : definition.nodes[box.index].op;
      // Where a click on the node leads: its state's browser, its query's console.
      const target = box.state
        ? href('t', name, 'state', box.id)
        : op.op === 'query-stream' ? href('t', name, 'query', op.name) : null;
      const described = `${box.state ? 'state' : 'operator'} ${box.id}: ${box.kind}${box.detail ? `, ${box.detail}` : ''}`;
      const kindLine = box.state ? 'state' : cut(`${box.kind} ×${box.parallelism}`, 28);
      const group = svg(
        'g',
        {
          class: box.state ? 'node state' : 'node op',
          'data-id': box.id,
          'data-kind': box.kind,
          'data-parallelism': box.parallelism,
          transform: `translate(${x(box)},${y(box)})`,
          tabindex: 0,
          role: target ? 'link' : 'img',
          // A link is named by its title (an aria-label would hide what it shows).
          'aria-label': target ? undefined : described,
          onclick: target ? () => { location.hash = target; } : undefined,
          onkeydown: target ? (event) => { if (event.key === 'Enter' || event.key === ' ') { event.preventDefault(); location.hash = target; } } : undefined,
        },
        svg('title', {}, target ? `${described}: opens its ${box.state ? 'state browser' : 'query console'}` : described),
        svg('rect', { width: W, height: H, rx: 6 }),
        svg('text', { class: 'name', x: 10, y: 20 }, cut(box.id, NAME_CHARS)),
        svg('text', { class: 'kind', x: 10, y: 38 }, kindLine),
        svg('text', { class: 'detail', x: 10, y: 56 }, cut(box.detail, 30)),
        time,
        rates,
      );
      this.nodes.set(box.id, group);
      return group;
    });
    this.svg = svg(
      'svg',
      // Fitted to its panel on a wide screen; on a narrow one at full size, panned.
      { class: window.matchMedia('(min-width: 641px)').matches ? 'graph fit' : 'graph', viewBox: `0 0 ${width} ${height}`, width, height, role: 'group', 'aria-label': `stream graph of ${name}: ${boxes.length} nodes` },
      svg(
        'defs',
        {},
        svg(
          'marker',
          { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto' },
          svg('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead' }),
        ),
      ),
      ...arrows,
      ...nodes,
      ...this.edgeLabels.map((e) => e.label),
    );
    const fitted = this.svg.classList.contains('fit');
    const size = el('button', {
      type: 'button',
      class: 'graph-size',
      'aria-pressed': String(!fitted),
      onclick: () => {
        const full = this.svg.classList.toggle('fit') === false;
        size.setAttribute('aria-pressed', String(full));
        size.textContent = full ? 'Fit to the panel' : 'Full size';
      },
    }, fitted ? 'Full size' : 'Fit to the panel');
    this.failing = el('p', { class: 'failing-node', role: 'status' });
    this.element = el('div', { class: 'graph-view' }, el('div', { class: 'graph-tools' }, size, this.failing), el('div', { class: 'graph-scroll' }, this.svg));
  }

  /** Marks the node named `id` as where the topology failed (none: no mark). */
  markFailing(id) {
    for (const [name, node] of this.nodes) {
      node.classList.toggle('failing', name === id);
      const label = node.getAttribute('aria-label');
      if (label !== null) node.setAttribute('aria-label', `${name === id ? 'FAILED HERE: ' : ''}${label.replace(/^FAILED HERE: /, '')}`);
    }
    this.failing.textContent = id && this.nodes.has(id) ? `The topology failed in operator ${id} (marked red).` : '';
  }

  /**
   * Shows each operator's time per committed batch, from a status, and its
   * tuples in and out a second over the history's last interval (its
   * totals since the start in the node's title and data).
   */
  update(status, history) {
    for (const [id, text] of this.rates) {
      const totals = status.operator_tuples?.[id];
      const rate = history?.operators?.[id];
      const node = this.nodes.get(id);
      if (this.windows.has(id)) {
        // A window: its tuples in, the windows it holds open, and what it found late.
        const late = status.late_tuples?.[id] ?? 0;
        const open = status.open_windows?.[id];
        node.dataset.late = late;
        node.dataset.open = open ?? '';
        const opened = open === undefined ? '' : ` · ${shortFigure(open)} open`;
        text.textContent = `in ${shortFigure(rate?.in_per_s ?? 0)}/s${opened} · late ${shortFigure(late)}`;
        continue;
      }
      if (!totals) {
        text.textContent = '';
        continue;
      }
      node.dataset.tuplesIn = totals.tuples_in;
      node.dataset.tuplesOut = totals.tuples_out;
      node.dataset.inPerS = rate?.in_per_s ?? '';
      node.dataset.outPerS = rate?.out_per_s ?? '';
      const perS = (v) => (v === undefined || v === null ? '–' : shortFigure(v));
      // Nodes of the commit phase write state: their output is not counted.
      const writesState = totals.tuples_out === 0 && totals.tuples_in > 0;
      // A spout takes in nothing: what it emits is its batches' tuples.
      const spout = node.dataset.kind === 'spout';
      text.textContent = writesState
        ? `in ${perS(rate?.in_per_s)}/s`
        : spout ? `out ${perS(rate?.out_per_s)}/s` : `in ${perS(rate?.in_per_s)}/s · out ${perS(rate?.out_per_s)}/s`;
      // How busy it was over the last second: its box shades as it fills.
      const busy = rate?.busy;
      node.dataset.busy = busy ?? '';
      node.classList.toggle('busy', busy !== undefined && busy >= 0.5);
      node.classList.toggle('saturated', busy !== undefined && busy >= 0.9);
      if (busy !== undefined) text.textContent += ` · ${Math.round(busy * 100)}% busy`;
    }
    // Each edge out of an operator carries what it gives out.
    for (const { from, label } of this.edgeLabels) {
      const out = history?.operators?.[from]?.out_per_s;
      label.textContent = out === undefined || out === null ? '' : `${shortFigure(out)}/s`;
    }
    const batches = status.batches || 0;
    for (const [id, text] of this.times) {
      if (this.windows.has(id)) {
        const mark = status.watermarks?.[id];
        const node = this.nodes.get(id);
        node.dataset.watermark = mark ?? '';
        text.textContent = mark === undefined ? 'no watermark yet' : `watermark ${watermarkText(mark)}`;
        continue;
      }
      const ms = status.operator_ms?.[id];
      if (ms !== undefined && batches > 0) text.textContent = `${figure(ms / batches, 3)} ms a batch`;
      else if (batches === 0 && status.last_committed > 0) text.textContent = 'no batch since its start';
      else if (batches === 0) text.textContent = 'no batch yet';
      else text.textContent = 'not timed yet';
    }
  }
}
