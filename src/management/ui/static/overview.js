// Overview: totals, message rates, queued messages, nodes, listeners and the
// definitions export/import.

import { get, post, enc, ApiError } from './api.js';
import { h, fill, table, fmtNum, fmtBytes, rate, msg, onSubmit, field } from './dom.js';
import { record, lineChart } from './chart.js';

const RATES = [['publish', 'Publish'], ['confirm', 'Confirm'], ['deliver_get', 'Deliver / get'],
  ['ack', 'Ack'], ['redeliver', 'Redeliver']];

export function page(ctx) {
  const totals = h('div', { class: 'stats', id: 'totals' });
  const charts = h('div', { class: 'cols' });
  const nodes = h('div', { id: 'nodes' });
  const listeners = h('div', { id: 'listeners' });
  fill(ctx.main,
    h('h1', {}, 'Overview'),
    h('section', { 'aria-labelledby': 'h-totals' }, h('h2', { id: 'h-totals' }, 'Totals'), totals),
    h('section', { 'aria-labelledby': 'h-rates' }, h('h2', { id: 'h-rates' }, 'Message rates and queued messages'), charts),
    h('section', { 'aria-labelledby': 'h-nodes' }, h('h2', { id: 'h-nodes' }, 'Nodes'), nodes),
    h('section', { 'aria-labelledby': 'h-listeners' }, h('h2', { id: 'h-listeners' }, 'Listeners'), listeners),
    definitions(ctx));

  return {
    async update() {
      const o = await get('/api/overview');
      const q = o.queue_totals || {};
      const t = o.object_totals || {};
      const stat = (k, v) => h('div', { class: 'stat' }, h('div', { class: 'v' }, fmtNum(v)), h('div', { class: 'k' }, k));
      fill(totals, stat('Ready', q.messages_ready), stat('Unacked', q.messages_unacknowledged),
        stat('Total', q.messages), stat('Connections', t.connections), stat('Channels', t.channels),
        stat('Exchanges', t.exchanges), stat('Queues', t.queues), stat('Consumers', t.consumers));
      const ms = o.message_stats || {};
      const values = {};
      for (const [k] of RATES) values[k] = rate(ms, k) || 0;
      values.ready = q.messages_ready || 0;
      values.unacked = q.messages_unacknowledged || 0;
      const hist = record('overview', values);
      fill(charts, lineChart('Message rates', hist, RATES, '/s'),
        lineChart('Queued messages', hist, [['ready', 'Ready'], ['unacked', 'Unacked']]));
      fill(listeners, table('Listeners', [
        { label: 'Protocol', cell: (l) => l.protocol },
        { label: 'Node', cell: (l) => l.node },
        { label: 'Bound to', cell: (l) => l.ip_address },
        { label: 'Port', cell: (l) => String(l.port), num: true },
      ], o.listeners || []));
      await updateNodes(nodes);
    },
  };
}

async function updateNodes(box) {
  let list;
  try {
    list = await get('/api/nodes');
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      fill(box, msg('warn', 'Node details need the monitoring or administrator tag (' + e.message + ').'));
      return;
    }
    throw e;
  }
  const alarms = (n) => {
    const a = [];
    if (n.mem_alarm) a.push('memory');
    if (n.disk_free_alarm) a.push('disk');
    return a.length ? h('span', { class: 'state-bad' }, a.join(', ') + ' alarm') : h('span', { class: 'state-ok' }, 'none');
  };
  fill(box, table('Nodes', [
    { label: 'Name', cell: (n) => n.name },
    { label: 'Role', cell: (n) => n.role },
    { label: 'Running', cell: (n) => (n.running ? 'yes' : h('span', { class: 'state-bad' }, 'no')) },
    { label: 'Memory', cell: (n) => (n.mem_used === undefined ? '–' : fmtBytes(n.mem_used) + ' of ' + fmtBytes(n.mem_limit)) },
    { label: 'Disk free', cell: (n) => (n.disk_free === undefined ? '–' : fmtBytes(n.disk_free) + ' (limit ' + fmtBytes(n.disk_free_limit) + ')') },
    { label: 'File descriptors', cell: (n) => (n.fd_used === undefined ? '–' : fmtNum(n.fd_used) + ' of ' + fmtNum(n.fd_total)) },
    { label: 'Alarms', cell: alarms },
    { label: 'Uptime', cell: (n) => (n.uptime === undefined ? '–' : Math.round(n.uptime / 1000) + ' s') },
  ], list));
}

function definitions(ctx) {
  const scope = () => (ctx.vhost() ? '/api/definitions/' + enc(ctx.vhost()) : '/api/definitions');
  const exportForm = onSubmit(h('form', { class: 'inline', id: 'export-form' },
    h('button', { type: 'submit' }, 'Download definitions')), async () => {
    const defs = await get(scope());
    const text = JSON.stringify(defs, null, 2);
    const a = h('a', {
      href: URL.createObjectURL(new Blob([text], { type: 'application/json' })),
      download: 'stablemq-definitions.json',
    });
    document.body.append(a);
    a.click();
    a.remove();
    return 'Downloaded stablemq-definitions.json (' + (ctx.vhost() ? 'virtual host ' + ctx.vhost() : 'all virtual hosts') + ').';
  });
  const file = h('input', { type: 'file', name: 'file', accept: '.json,application/json', required: true });
  const importForm = onSubmit(h('form', { class: 'grid', id: 'import-form' }, field('Definitions file', file),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Upload definitions'))), async () => {
    const f = file.files && file.files[0];
    if (!f) throw new Error('Choose a definitions file first.');
    const text = await f.text();
    try { JSON.parse(text); } catch (e) { throw new Error('The file is not JSON: ' + e.message); }
    await post(scope(), text);
    return 'Definitions imported from ' + f.name + '.';
  });
  return h('section', { 'aria-labelledby': 'h-defs' }, h('h2', { id: 'h-defs' }, 'Export and import definitions'),
    h('p', {}, 'Queues, exchanges, bindings, users, virtual hosts, permissions and policies as one JSON file (of the selected virtual host, or all).'),
    exportForm, importForm);
}
