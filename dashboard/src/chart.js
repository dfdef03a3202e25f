// Live charts of a topology's history (GET .../history: a sample a second,
// the last 15 minutes, each a rate or latency of the interval before it),
// drawn by uPlot; each with its latest figures as text beside it (what a
// screen reader reads; the canvas is hidden from it). Drag across a chart
// to zoom into a span; a double click shows all again. A chart's scale goes
// up to its shown samples' 95th percentile where the peak is far above it
// (a catch-up's spike would flatten steady traffic to nothing): the samples
// above are marked at the chart's top, and its text names the peak.

import { el, figure } from './dom.js';

/** The history kept: the widest a chart shows. */
const WINDOW_S = 15 * 60;
/** The narrowest: a young topology's few samples are not crammed at one edge. */
const MIN_WINDOW_S = 60;

/** The throughput chart's series: spout tuples committed a second. */
export const THROUGHPUT = [{ column: 'tuples_per_s', label: 'tuples', unit: 'tuples/s', stroke: '#16a34a', scale: 'tuples' }];

/** Batches committed a second, apart: on one chart with tuples, one hides the other. */
export const BATCHES = [{ column: 'batches_per_s', label: 'batches', unit: 'batches/s', stroke: '#2563eb', scale: 'batches' }];

/** The commit latency chart's series: of each interval's commits. */
export const LATENCY = [
  { column: 'commit_p50_ms', label: 'commit p50', unit: 'ms', stroke: '#9333ea', scale: 'ms', points: true },
  { column: 'commit_p99_ms', label: 'commit p99', unit: 'ms', stroke: '#dc2626', scale: 'ms', points: true },
];

/** Where the greatest sample is at most this many times the 95th percentile, the scale shows it. */
const PEAK_SHOWN = 2;

/** Fewer samples than this are too few for a percentile: the scale shows them all. */
const FEW = 10;

/**
 * The top of a scale over `values` (nulls skipped): their greatest, or,
 * of FEW or more, their 95th percentile where the greatest is more than
 * PEAK_SHOWN times above it.
 */
export function scaleTop(values) {
  const sorted = values.filter((v) => v !== null && v !== undefined && Number.isFinite(v)).sort((a, b) => a - b);
  if (!sorted.length) return 0;
  const max = sorted[sorted.length - 1];
  const p95 = sorted[Math.floor(0.95 * (sorted.length - 1))];
  return sorted.length < FEW || max <= PEAK_SHOWN * p95 ? max : p95;
}

/** A time of day to the second. */
const clockOf = (s) => new Date(s * 1000).toLocaleTimeString('en-GB');

/** A chart of `series` over time, in an element of its own (`element`). */
export class TimeChart {
  constructor(series, { height = 150, title } = {}) {
    this.series = series;
    this.height = height;
    this.title = title ?? series.map((s) => s.label).join(', ');
    this.text = el('p', { class: 'chart-text' }, 'No sample yet.');
    this.canvas = el('div', { class: 'canvas', 'aria-hidden': 'true' });
    this.element = el('figure', { class: 'chart', 'data-points': 0 },
      title ? el('h3', {}, title) : null, this.canvas, el('figcaption', {}, this.text));
    this.plot = null;
    this.zoomedIn = false;
  }

  options(width) {
    const span = (u) => {
      const at = u.data[0];
      const kept = at.length ? at[at.length - 1] - at[0] : 0;
      return Math.min(WINDOW_S, Math.max(MIN_WINDOW_S, kept));
    };
    const range = (u, _, max) => {
      const end = max ?? Date.now() / 1000;
      return [end - span(u), end];
    };
    const scales = { x: { time: true, range } };
    // One line of clock times, far enough apart not to run into each other
    // on a narrow chart (uPlot's own adds a second line of dates that does).
    const clock = (_, splits) => splits.map(clockOf);
    const axes = [{ stroke: '#334155', space: 80, values: clock }];
    // A scale's top: of the samples shown (those of a zoomed span, when zoomed).
    const top = (u, scale) => {
      const at = u.data[0];
      const [from, to] = [u.scales.x.min ?? -Infinity, u.scales.x.max ?? Infinity];
      const values = [];
      for (const [i, s] of this.series.entries()) {
        if (s.scale !== scale) continue;
        u.data[i + 1].forEach((v, j) => { if (at[j] >= from && at[j] <= to) values.push(v); });
      }
      return scaleTop(values);
    };
    for (const [i, s] of this.series.entries()) {
      if (scales[s.scale]) continue;
      scales[s.scale] = { auto: true, range: (u) => [0, Math.max(top(u, s.scale), 1) * 1.1] };
      // Wide enough for the longest figure and its unit; never clipped.
      axes.push({
        scale: s.scale,
        side: i === 0 ? 3 : 1,
        stroke: '#334155',
        size: 72,
        label: s.unit,
        labelSize: 18,
        grid: { show: i === 0 },
        values: (_, splits) => splits.map((v) => figure(v, 1)),
      });
    }
    return {
      width,
      height: this.height,
      scales,
      axes,
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
      // A span dragged across zooms in, and stays while samples come; a
      // double click (uPlot's own) shows everything again.
      hooks: {
        setSelect: [(u) => {
          if (u.select.width > 0) this.zoomedIn = true;
        }],
        // Once drawn, its scales are known: the marks and the text follow them.
        draw: [(u) => {
          this.markAbove(u);
          this.element.dataset.top = String(u.scales[this.series[0].scale].max);
          if (this.history) this.describe(this.history);
        }],
      },
      series: [
        { label: 'at', value: (_, v) => (v === null || v === undefined ? '–' : clockOf(v)) },
        ...this.series.map((s) => ({
          label: s.label,
          stroke: s.stroke,
          width: 2,
          scale: s.scale,
          spanGaps: false,
          value: (_, v) => (v === null || v === undefined ? '–' : `${figure(v, 2)} ${s.unit}`),
          // A second with no commit has no latency: lone figures show as dots.
          ...(s.points ? { points: { show: true, size: 5 } } : {}),
        })),
      ],
    };
  }

  /** Marks each shown sample above its scale's top with a triangle at the chart's top, in its series' colour. */
  markAbove(u) {
    const { ctx, bbox } = u;
    const r = globalThis.devicePixelRatio || 1;
    let above = 0;
    ctx.save();
    for (const [i, s] of this.series.entries()) {
      const max = u.scales[s.scale].max;
      ctx.fillStyle = s.stroke;
      u.data[i + 1].forEach((v, j) => {
        if (v === null || v === undefined || v <= max) return;
        const x = u.valToPos(u.data[0][j], 'x', true);
        if (x < bbox.left || x > bbox.left + bbox.width) return;
        above += 1;
        ctx.beginPath();
        ctx.moveTo(x, bbox.top);
        ctx.lineTo(x - 4 * r, bbox.top + 7 * r);
        ctx.lineTo(x + 4 * r, bbox.top + 7 * r);
        ctx.fill();
      });
    }
    ctx.restore();
    this.element.dataset.above = String(above);
  }

  /** Draws `history` (columns of samples, oldest first). */
  update(history) {
    const data = [history.at, ...this.series.map((s) => history[s.column])];
    const width = Math.max(this.element.clientWidth, 200);
    if (!this.plot) {
      this.plot = new globalThis.uPlot(this.options(width), data, this.canvas);
      this.plot.over.addEventListener('dblclick', () => {
        this.zoomedIn = false;
      });
      new ResizeObserver(() => {
        const now = Math.max(this.element.clientWidth, 200);
        if (this.plot && Math.abs(now - this.plot.width) > 4) this.plot.setSize({ width: now, height: this.height });
      }).observe(this.element);
    } else {
      // A zoomed span stays as it is; else the latest window is shown.
      this.plot.setData(data, !this.zoomedIn);
    }
    this.history = history;
    this.describe(history);
    // How many samples it holds: what a reader (or a test) can check.
    this.element.setAttribute('data-points', String(history.at.length));
  }

  /** The chart's latest figures as text: its alternative for who cannot see it. */
  describe(history) {
    const n = history.at.length;
    if (!n) {
      this.text.textContent = `${this.title}: no sample yet.`;
      return;
    }
    const latest = this.series.map((s) => {
      const v = history[s.column][n - 1];
      const column = history[s.column].filter((x) => x !== null && x !== undefined);
      const peak = column.length ? Math.max(...column) : null;
      // A peak above the scale: when it was, and that it is marked.
      const max = this.plot?.scales[s.scale]?.max;
      const beyond = peak !== null && max !== undefined && max !== null && peak > max
        ? ` at ${clockOf(history.at[history[s.column].indexOf(peak)])}, above the scale, marked ▲ at its top`
        : '';
      return `${s.label} ${v === null || v === undefined ? 'none' : `${figure(v, 2)} ${s.unit}`}` +
        (peak === null ? '' : ` (peak ${figure(peak, 2)}${beyond})`);
    });
    const kept = Math.round(history.at[n - 1] - history.at[0]);
    const over = kept < 120 ? `${kept} s` : `${Math.round(kept / 60)} min`;
    this.text.textContent = `At ${clockOf(history.at[n - 1])}: ${latest.join('; ')}, over the last ${over}.`;
  }
}
