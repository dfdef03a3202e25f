// The cluster page: its hosts (the leader marked, when each joined, each
// one's share of each topology and its rate there), and each topology's
// assignment: which host owns which spout partitions and how many state
// slots, under which epoch and why. Refreshed every second from GET
// /v1/cluster and the topologies' statuses (each host's rate, as the hosts
// last shared them), with the membership and assignment changes the server
// kept, and why each happened.

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

/** A change the server kept, as a line: when, what, why. */
function changeLine(change) {
  return el('li', { 'data-at': change.at_unix_ms },
    el('span', { class: 'quiet' }, `${timeOf(change.at_unix_ms)} `), `${change.what}: ${change.reason}`);
}

export async function render(view) {
  const body = el('div');
  // Membership and assignment changes, as the server kept them (the last
  // 100 this host saw), latest first.
  const log = el('ol', { class: 'changes plain', 'aria-label': 'changes, the latest first' });
  replace(view.main, el('h1', {}, 'Cluster'), body,
    el('section', {}, el('h2', {}, 'Changes this host saw'), log));
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
    const kept = [...(cluster.changes ?? [])].reverse();
    replace(log, kept.length ? kept.map(changeLine) : el('li', { class: 'quiet' }, 'No change seen yet.'));
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
