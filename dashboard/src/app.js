// The dashboard: routes (in the URL's fragment), the token, and the life
// of the page on screen, whose refreshes stop when another replaces it.

import { ApiError, Unauthorized, Unreachable, setToken } from './api.js';
import { el, href, replace, submitForm } from './dom.js';
import * as cluster from './cluster.js';
import * as query from './query.js';
import * as state from './state.js';
import * as topologies from './topologies.js';
import * as topology from './topology.js';

const main = document.getElementById('main');
const crumbs = document.getElementById('crumbs');
const problem = document.getElementById('problem');

/** The page on screen: its element, its refreshes, and how it fails. */
class View {
  constructor() {
    this.main = el('div', { class: 'page' });
    this.closed = false;
    this.timers = new Set();
  }

  /** Runs `work` now and every `ms` after it ends, until the page goes. */
  every(ms, work) {
    const tick = async () => {
      if (this.closed) return;
      const ok = await this.attempt(work);
      if (ok && !this.closed) {
        const timer = setTimeout(() => {
          this.timers.delete(timer);
          tick();
        }, ms);
        this.timers.add(timer);
      }
    };
    tick();
  }

  /**
   * Runs `work`; a 401 asks for the token again, another refusal is shown
   * above the page. Answers whether it went through.
   */
  async attempt(work) {
    try {
      await work();
      if (!this.closed) {
        showProblem(null);
        connection.reached();
      }
      return true;
    } catch (error) {
      if (this.closed) return false;
      if (error instanceof Unauthorized) {
        // A first visit sent no token: that is no error, only a question.
        askForToken(error.sent ? error.message : null);
        return false;
      }
      if (error instanceof Unreachable) {
        connection.lost(error.message);
        return true;
      }
      showProblem(error instanceof ApiError ? error.message : `The dashboard failed: ${error.message}`);
      // Refreshes go on: the server may answer again.
      return true;
    }
  }

  /** Asks for the token again when `error` is a 401; answers whether it was. */
  unauthorized(error) {
    if (!(error instanceof Unauthorized) || this.closed) return false;
    askForToken(error.message);
    return true;
  }

  close() {
    this.closed = true;
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
  }
}

let current = null;

/**
 * Whether the server answers. While it does not, the page says so, no run
 * state is shown as if known, and nothing can be asked of the server.
 */
const connection = {
  since: null,
  lost(why) {
    if (this.since === null) this.since = new Date();
    document.body.dataset.connection = 'lost';
    showProblem(
      `Cannot reach the server since ${this.since.toLocaleTimeString('en-GB')} (${why}): ` +
        'the figures below are as they were then; trying again every second.',
    );
    for (const badge of main.querySelectorAll('.badge[data-state]')) {
      badge.className = 'badge unknown';
      badge.dataset.state = 'unknown';
      badge.textContent = 'unknown';
    }
    for (const control of main.querySelectorAll('button, input, select, textarea')) {
      if (control.disabled) continue;
      control.disabled = true;
      control.dataset.offline = '';
    }
  },
  reached() {
    if (this.since === null) return;
    this.since = null;
    delete document.body.dataset.connection;
    for (const control of main.querySelectorAll('[data-offline]')) {
      control.disabled = false;
      delete control.dataset.offline;
    }
  },
};

function showProblem(message) {
  problem.hidden = !message;
  replace(problem, message ?? '');
}

/** The fragment's route: a page and its parameters. */
function route() {
  const decode = (part) => {
    try {
      return decodeURIComponent(part);
    } catch {
      return part;
    }
  };
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter((p) => p !== '').map(decode);
  if (parts[0] === 'cluster') return { page: cluster, params: {} };
  if (parts[0] === 't' && parts.length >= 2) {
    const name = parts[1];
    if (parts[2] === 'state' && parts.length === 4) return { page: state, params: { name, state: parts[3] } };
    if (parts[2] === 'query') return { page: query, params: { name, query: parts[3] } };
    if (parts.length === 2) return { page: topology, params: { name } };
  }
  return { page: topologies, params: {} };
}

function show() {
  current?.close();
  showProblem(null);
  connection.since = null;
  delete document.body.dataset.connection;
  const { page, params } = route();
  const view = new View();
  current = view;
  replace(main, view.main);
  replace(crumbs, ...crumbsOf(page, params));
  view.attempt(() => page.render(view, params));
}

function crumbsOf(page, params) {
  const trail = [el('a', { href: '#/' }, 'Topologies')];
  if (page === cluster) trail.push(el('span', {}, 'Cluster'));
  if (params.name !== undefined) trail.push(el('a', { href: href('t', params.name) }, params.name));
  if (params.state !== undefined) trail.push(el('span', {}, `state ${params.state}`));
  if (page === query) trail.push(el('span', {}, 'query console'));
  return trail.flatMap((crumb, i) => (i === 0 ? [crumb] : [el('span', { class: 'sep' }, '›'), crumb]));
}

/** Forgets the token and asks for it, showing nothing but `message`. */
function askForToken(message) {
  current?.close();
  current = null;
  setToken(null);
  showProblem(null);
  replace(crumbs);
  const input = el('input', {
    type: 'password',
    name: 'token',
    id: 'token',
    autocomplete: 'off',
    required: true,
    spellcheck: 'false',
  });
  const form = submitForm(
    'token',
    () => {
      setToken(input.value.trim());
      show();
    },
    el('h1', {}, message ? 'That token was refused' : 'This server wants its token'),
    message ? el('p', { class: 'error', role: 'alert' }, message) : null,
    message ? null : el('p', {}, 'Give the token `weir serve` was started with (the one its --token-file holds).'),
    el('p', { class: 'quiet' }, 'It is kept in this tab only, until the tab is closed.'),
    el('label', { for: 'token' }, 'Token'),
    input,
    el('button', { type: 'submit' }, 'Open the dashboard'),
  );
  replace(main, form);
  input.focus();
}

window.addEventListener('hashchange', show);
show();
