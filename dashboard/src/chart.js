// Live charts of a topology's history (GET .../history: a sample a second,
// the last 15 minutes), drawn by uPlot.

import { el, figure } from './dom.js';

/** The history kept: the widest a chart shows. */
const WINDOW_S = 15 * 60;
/** The narrowest: a young topology's few samples are not crammed at one edge. */
const MIN_WINDOW_S = 60;

/** The throughput chart's series. */
export const THROUGHPUT = [
  { column: 'batches_per_s', label: 'batches/s', stroke: '#2563eb', scale: 'batches' },
  { column: 'tuples_per_s', label: 'tuples/s', stroke: '#16a34a', scale: 'tuples' },
];

/** The commit latency chart's series. */
export const LATENCY = [
  { column: 'commit_p50_ms', label: 'commit p50 ms', stroke: '#9333ea', scale: 'ms' },
  { column: 'commit_p99_ms', label: 'commit p99 ms', stroke: '#dc2626', scale: 'ms' },
];

/** A chart of `series` over time, in an element of its own (`element`). */
export class TimeChart {
  constructor(series, { height = 150, title } = {}) {
    this.series = series;
    this.height = height;
    this.element = el('div', { class: 'chart', 'data-points': 0 });
    if (title) this.element.append(el('h3', {}, title));
    this.plot = null;
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
    const clock = (_, splits) => splits.map((s) => new Date(s * 1000).toLocaleTimeString('en-GB'));
    const axes = [{ stroke: '#475569', space: 80, values: clock }];
    for (const [i, s] of this.series.entries()) {
      if (scales[s.scale]) continue;
      scales[s.scale] = { auto: true, range: (_, min, max) => [0, Math.max(max, min + 1) * 1.1] };
      axes.push({ scale: s.scale, side: i === 0 ? 3 : 1, stroke: s.stroke, size: 60, grid: { show: i === 0 } });
    }
    return {
      width,
      height: this.height,
      scales,
      axes,
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      series: [
        {},
        ...this.series.map((s) => ({
          label: s.label,
          stroke: s.stroke,
          width: 2,
          scale: s.scale,
          spanGaps: false,
          value: (_, v) => figure(v),
        })),
      ],
    };
  }

  /** Draws `history` (columns of samples, oldest first). */
  update(history) {
    const data = [history.at, ...this.series.map((s) => history[s.column])];
    const width = Math.max(this.element.clientWidth, 320);
    if (!this.plot) {
      this.plot = new globalThis.uPlot(this.options(width), data, this.element);
      new ResizeObserver(() => {
        const now = Math.max(this.element.clientWidth, 320);
        if (this.plot && Math.abs(now - this.plot.width) > 4) this.plot.setSize({ width: now, height: this.height });
      }).observe(this.element);
    } else {
      this.plot.setData(data);
    }
    // How many samples it holds: what a reader (or a test) can check.
    this.element.setAttribute('data-points', String(history.at.length));
  }
}
