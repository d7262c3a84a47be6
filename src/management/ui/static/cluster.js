// Cluster: every node's role, epoch, stable index, store progress and lag,
// whether the master hears it (replicating) and when; a banner when no
// master is elected or a quorum of stores is missing. From /api/nodes.

import { get } from './api.js';
import { h, fill, table, fmtNum, fmtMs, msg } from './dom.js';

export function page(ctx) {
  const banner = h('div', { id: 'cluster-banner' });
  const summary = h('p', { id: 'cluster-summary' });
  const nodes = h('div', { id: 'cluster-nodes' });
  fill(ctx.main, h('h1', {}, 'Cluster'), banner,
    h('section', { 'aria-labelledby': 'h-cn' }, h('h2', { id: 'h-cn' }, 'Nodes'), summary, nodes),
    h('p', {}, 'A message is stable once it is on disk on a quorum of stores. The master is the one broker that serves clients; slaves proxy to it. Store lag counts entries a store is behind the most advanced one.'));
  return {
    async update() {
      const list = await get('/api/nodes');
      const master = list.find((n) => n.role === 'master' && n.running);
      const stores = list.filter((n) => (n.roles || []).includes('store'));
      const up = stores.filter((n) => n.running && n.store && n.replicating !== false);
      const need = Math.floor(stores.length / 2) + 1;
      const warn = [];
      if (!master) warn.push(msg('error', 'No master is elected: clients cannot publish or consume until one is.'));
      if (stores.length && up.length < need) {
        warn.push(msg('error', `A quorum of stores is missing: ${up.length} of ${stores.length} stores take part, ${need} are needed. Nothing new becomes stable.`));
      }
      fill(banner, warn.map((w) => { w.classList.add('banner'); return w; }));
      const maxStable = Math.max(0, ...list.map((n) => n.stable_index || 0));
      fill(summary, 'Master: ', h('strong', { id: 'cluster-master' }, master ? master.name : 'none'),
        master ? ` (epoch ${fmtNum(master.epoch)})` : '', ` — stable index ${fmtNum(maxStable)} — ${list.length} node${list.length === 1 ? '' : 's'}, ${up.length} of ${stores.length} stores up.`);
      const yesNo = (v, bad) => (v === null || v === undefined ? '–' : v ? 'yes' : h('span', { class: bad ? 'state-bad' : '' }, 'no'));
      fill(nodes, table('Cluster nodes', [
        { label: 'Node', cell: (n) => n.name },
        { label: 'Id', cell: (n) => String(n.id), num: true },
        { label: 'Runs', cell: (n) => (n.roles || []).join(', ') },
        { label: 'Role', cell: (n) => (n.role === 'master' ? h('strong', {}, 'master') : n.role) },
        { label: 'Running', cell: (n) => yesNo(n.running, true) },
        { label: 'Epoch', cell: (n) => fmtNum(n.epoch), num: true },
        { label: 'Stable index', cell: (n) => fmtNum(n.stable_index), num: true },
        { label: 'Store last index', cell: (n) => (n.store ? fmtNum(n.store.last_index) : '–'), num: true },
        { label: 'Store lag', cell: (n) => (n.store_lag === null || n.store_lag === undefined ? '–' : fmtNum(n.store_lag)), num: true },
        { label: 'Replicating', cell: (n) => yesNo(n.replicating, true) },
        { label: 'Last heard by master', cell: (n) => (n.role === 'master' ? '(is master)' : fmtMs(n.master_heard_ms_ago)) },
      ], list));
    },
  };
}
