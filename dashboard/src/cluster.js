// The cluster page: its hosts (the leader marked, when each joined, each
// one's share of each topology and its rate there), and each topology's
// assignment: which host owns which spout partitions and how many state
// slots, under which epoch and why. Refreshed every second from GET
// /v1/cluster and the topologies' statuses (each host's rate, as the hosts
// last shared them).

import { ApiError, get, path } from './api.js';
import { el, figure, href, replace } from './dom.js';
import { timeOf } from './failure.js';

/** Each host's share of an assignment: its partitions and its slot count. */
export function shares(assignment) {
  const byHost = new Map();
  for (const [unit, owner] of Object.entries(assignment?.units ?? {})) {
    const share = byHost.get(owner.host) ?? { partitions: [], slots: 0, units: 0 };
    share.units += 1;
    if (unit.startsWith('partition/')) share.partitions.push(unit.slice('partition/'.length));
    else if (unit.startsWith('slot/')) share.slots += 1;
    byHost.set(owner.host, share);
  }
  return byHost;
}

function hostsTable(view, statuses) {
  const all = Object.entries(view.topologies ?? {});
  return el(
    'div',
    { class: 'table-scroll' },
    el(
      'table',
      { class: 'hosts' },
      el('caption', { class: 'sr-only' }, 'Hosts of the cluster'),
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'host'), el('th', { scope: 'col' }, 'role'), el('th', { scope: 'col' }, 'joined'), el('th', { scope: 'col' }, 'share'))),
      el('tbody', {}, (view.hosts ?? []).map((host) => {
        const owned = all.map(([name, t]) => {
          const share = shares(t.assignment).get(host.id);
          if (!share) return null;
          const total = Object.keys(t.assignment?.units ?? {}).length;
          const rate = statuses.get(name)?.cluster?.hosts?.[host.id]?.tuples_per_s;
          return el('li', { 'data-topology': name, 'data-units': share.units },
            `${name}: ${share.units} of ${total} units (${share.partitions.length} partitions, ${share.slots} slots)`,
            rate === undefined || rate === null ? '' : `, ${figure(rate, 0)} tuples/s`);
        }).filter(Boolean);
        return el('tr', { 'data-host': host.id },
          el('th', { scope: 'row', class: 'host-id' }, host.id, host.id === view.host ? el('span', { class: 'quiet' }, ' (this one)') : null),
          el('td', { class: 'role' }, host.id === view.leader ? 'leader' : 'member'),
          el('td', {}, timeOf(host.joined_unix_ms)),
          el('td', { class: 'share' }, owned.length ? el('ul', { class: 'plain' }, owned) : el('span', { class: 'quiet' }, 'nothing assigned')));
      })),
    ),
  );
}

function assignmentTable(name, topology) {
  const record = topology.assignment;
  const heading = el('h3', {}, el('a', { href: href('t', name) }, name));
  if (!record) return el('div', { class: 'assignment', 'data-name': name }, heading, el('p', { class: 'quiet' }, 'Not assigned yet.'));
  const rows = [...shares(record)].map(([host, share]) => el('tr', { 'data-host': host },
    el('th', { scope: 'row' }, host),
    el('td', { class: 'partitions' }, share.partitions.join(', ') || '–'),
    el('td', { class: 'num slots' }, figure(share.slots))));
  return el(
    'div',
    { class: 'assignment', 'data-name': name },
    heading,
    el('p', { class: 'quiet' }, `epoch ${record.assignment?.epoch ?? record.epoch}; ${record.reason}`),
    el('div', { class: 'table-scroll' },
      el('table', {},
        el('caption', { class: 'sr-only' }, `Assignment of ${name}`),
        el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'host'), el('th', { scope: 'col' }, 'partitions'), el('th', { scope: 'col' }, 'slots'))),
        el('tbody', {}, rows))),
  );
}

/** Changes a page keeps: the latest. */
const CHANGES_KEPT = 50;

/**
 * What changed between two views of the cluster: hosts that joined or
 * left, a new leader, and assignments written anew (with the leader's
 * reason); each a line.
 */
export function changes(before, after) {
  if (!before) return [];
  const seen = [];
  const ids = (v) => new Set((v.hosts ?? []).map((h) => h.id));
  const [was, now] = [ids(before), ids(after)];
  for (const id of now) if (!was.has(id)) seen.push(`host ${id} joined`);
  for (const id of was) if (!now.has(id)) seen.push(`host ${id} left`);
  if (before.leader !== after.leader) seen.push(`leader: ${after.leader ?? 'none'} (was ${before.leader ?? 'none'})`);
  for (const [name, t] of Object.entries(after.topologies ?? {})) {
    const epoch = t.assignment?.epoch;
    if (epoch !== undefined && epoch !== before.topologies?.[name]?.assignment?.epoch) {
      seen.push(`${name}: assignment epoch ${epoch}, ${t.assignment.reason}`);
    }
  }
  return seen;
}

export async function render(view) {
  const body = el('div');
  // Membership and assignment changes seen while the page is open, latest first.
  const log = el('ol', { class: 'changes plain', 'aria-label': 'changes seen, the latest first' });
  let previous = null;
  replace(view.main, el('h1', {}, 'Cluster'), body,
    el('section', {}, el('h2', {}, 'Changes seen since this page opened'), log));
  view.every(1000, async () => {
    let cluster;
    let statuses;
    try {
      cluster = await get(path('cluster'));
      statuses = new Map((await get(path('topologies'))).map((s) => [s.name, s]));
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) {
        replace(body, el('section', {}, el('p', { class: 'no-cluster' }, 'This server is in no cluster: it runs its topologies alone.')));
        return;
      }
      throw error;
    }
    if (view.closed) return;
    const at = new Date().toLocaleTimeString('en-GB');
    for (const line of changes(previous, cluster)) {
      log.prepend(el('li', {}, el('span', { class: 'quiet' }, `${at} `), line));
    }
    while (log.children.length > CHANGES_KEPT) log.lastElementChild.remove();
    previous = cluster;
    const topologies = Object.entries(cluster.topologies ?? {});
    replace(
      body,
      el('section', { class: 'cluster-summary' },
        el('dl', { class: 'figures' },
          el('div', {}, el('dt', {}, 'cluster'), el('dd', { class: 'cluster-name' }, cluster.cluster)),
          el('div', {}, el('dt', {}, 'leader'), el('dd', { class: 'leader' }, cluster.leader ?? 'none')),
          el('div', {}, el('dt', {}, 'hosts'), el('dd', { class: 'host-count' }, figure(cluster.hosts?.length ?? 0))),
          el('div', {}, el('dt', {}, 'topologies'), el('dd', {}, figure(topologies.length)))),
        cluster.error ? el('p', { class: 'error' }, cluster.error) : null),
      el('section', {}, el('h2', {}, 'Hosts'), hostsTable(cluster, statuses)),
      el('section', {}, el('h2', {}, 'Assignments'),
        topologies.length ? topologies.map(([name, t]) => assignmentTable(name, t)) : el('p', { class: 'quiet' }, 'No topology is deployed to the cluster.')),
    );
  });
}
