// Connections and channels: paged lists, and one connection's page with its
// client properties, channels and the force-close button.

import { get, del, enc } from './api.js';
import { h, fill, table, fmtNum, fmtBytes, link, field, input, onSubmit } from './dom.js';
import { listState, listControls, fetchPage, pager, sorter } from './queues.js';

const connState = listState('name');
const chanState = listState('name');

const client = (c) => {
  const p = c.client_properties || {};
  return [p.product, p.version].filter(Boolean).join(' ') || '–';
};
const stateCell = (s) => (s === 'running' ? s : h('span', { class: 'state-bad' }, s));
const rateOf = (d) => (d && typeof d.rate === 'number' ? fmtBytes(Math.round(d.rate)) + '/s' : '–');

export const list = {
  page(ctx) {
    const box = h('div', { id: 'connection-list' });
    const reload = () => ctx.refresh();
    fill(ctx.main, h('h1', {}, 'Connections'),
      h('section', { 'aria-labelledby': 'h-cl' }, h('h2', { id: 'h-cl' }, 'All connections'), listControls('connections', connState, reload), box));
    return {
      async update() {
        const v = ctx.vhost();
        const res = await fetchPage(v ? '/api/vhosts/' + enc(v) + '/connections' : '/api/connections', connState);
        fill(box, table('Connections', [
          { label: 'Name', cell: (c) => link('#/connections/' + enc(c.name), c.name), sort: 'name' },
          { label: 'Client-provided name', cell: (c) => c.user_provided_name || '–' },
          { label: 'User', cell: (c) => c.user, sort: 'user' },
          { label: 'Virtual host', cell: (c) => c.vhost, sort: 'vhost' },
          { label: 'State', cell: (c) => stateCell(c.state), sort: 'state' },
          { label: 'TLS', cell: (c) => (c.ssl ? 'yes' : 'no') },
          { label: 'Protocol', cell: (c) => c.protocol },
          { label: 'Client', cell: client },
          { label: 'Channels', cell: (c) => fmtNum(c.channels), num: true, sort: 'channels' },
          { label: 'From client', cell: (c) => rateOf(c.recv_oct_details), num: true, sort: 'recv_oct_details.rate' },
          { label: 'To client', cell: (c) => rateOf(c.send_oct_details), num: true, sort: 'send_oct_details.rate' },
        ], res.items, sorter(connState, reload)), pager(connState, res, reload));
      },
    };
  },
};

function channelColumns() {
  return [
    { label: 'Channel', cell: (c) => c.name, sort: 'name' },
    { label: 'Connection', cell: (c) => (c.connection_details ? link('#/connections/' + enc(c.connection_details.name), c.connection_details.name) : '–') },
    { label: 'User', cell: (c) => c.user, sort: 'user' },
    { label: 'Virtual host', cell: (c) => c.vhost, sort: 'vhost' },
    { label: 'State', cell: (c) => stateCell(c.state), sort: 'state' },
    { label: 'Mode', cell: (c) => [c.confirm ? 'confirm' : '', c.transactional ? 'transactional' : ''].filter(Boolean).join(', ') || '–' },
    { label: 'Prefetch', cell: (c) => fmtNum(c.prefetch_count), num: true },
    { label: 'Unacked', cell: (c) => fmtNum(c.messages_unacknowledged), num: true, sort: 'messages_unacknowledged' },
    { label: 'Unconfirmed', cell: (c) => fmtNum(c.messages_unconfirmed), num: true },
    { label: 'Consumers', cell: (c) => fmtNum(c.consumer_count), num: true, sort: 'consumer_count' },
  ];
}

export const channels = {
  page(ctx) {
    const box = h('div', { id: 'channel-list' });
    const reload = () => ctx.refresh();
    fill(ctx.main, h('h1', {}, 'Channels'),
      h('section', { 'aria-labelledby': 'h-chl' }, h('h2', { id: 'h-chl' }, 'All channels'), listControls('channels', chanState, reload), box));
    return {
      async update() {
        const v = ctx.vhost();
        const res = await fetchPage(v ? '/api/vhosts/' + enc(v) + '/channels' : '/api/channels', chanState);
        fill(box, table('Channels', channelColumns(), res.items, sorter(chanState, reload)), pager(chanState, res, reload));
      },
    };
  },
};

export const one = {
  page(ctx) {
    const [name] = ctx.args;
    const base = '/api/connections/' + enc(name);
    const details = h('div', { id: 'connection-details' });
    const props = h('div');
    const chans = h('div');
    let closed = false;
    const reason = input('reason', { value: 'Closed via management plugin' });
    const close = onSubmit(h('form', { class: 'grid', id: 'close-form' }, field('Reason', reason),
      h('div', { class: 'full' }, h('button', { type: 'submit', class: 'danger' }, 'Force close'))), async () => {
      if (!window.confirm('Force close connection ' + name + '?')) return '';
      await del(base, { 'X-Reason': reason.value });
      closed = true;
      fill(details, 'This connection is closed.');
      fill(chans);
      return 'Connection ' + name + ' closed.';
    });
    fill(ctx.main, h('p', {}, link('#/connections', '← All connections')),
      h('h1', {}, 'Connection ', name),
      h('section', { 'aria-labelledby': 'h-cd' }, h('h2', { id: 'h-cd' }, 'Details'), details),
      h('section', { 'aria-labelledby': 'h-cp' }, h('h2', { id: 'h-cp' }, 'Client properties'), props),
      h('section', { 'aria-labelledby': 'h-cc' }, h('h2', { id: 'h-cc' }, 'Channels'), chans),
      h('section', { 'aria-labelledby': 'h-cf' }, h('h2', { id: 'h-cf' }, 'Close this connection'), close));
    return {
      async update() {
        if (closed) return;
        const c = await get(base);
        const row = (k, v) => h('tr', {}, h('th', { scope: 'row' }, k), h('td', {}, v));
        fill(details, h('div', { class: 'table-wrap' }, h('table', { class: 'kv' }, h('tbody', {},
          row('User', c.user), row('Virtual host', c.vhost), row('State', stateCell(c.state)),
          row('Protocol', c.protocol), row('Authentication', c.auth_mechanism), row('TLS', c.ssl ? 'yes' : 'no'),
          row('Peer', (c.peer_host || '') + ':' + (c.peer_port || '')), row('Heartbeat', c.timeout + ' s'),
          row('Frame max', fmtNum(c.frame_max) + ' bytes'), row('Channel max', fmtNum(c.channel_max)),
          row('Connected at', new Date(c.connected_at).toLocaleString()),
          row('Received', fmtBytes(c.recv_oct) + ' (' + rateOf(c.recv_oct_details) + ')'),
          row('Sent', fmtBytes(c.send_oct) + ' (' + rateOf(c.send_oct_details) + ')')))));
        const cp = c.client_properties || {};
        fill(props, h('div', { class: 'table-wrap' }, h('table', { class: 'kv' }, h('tbody', {},
          Object.entries(cp).map(([k, v]) => row(k, typeof v === 'object' ? JSON.stringify(v) : String(v)))))));
        fill(chans, table('Channels', channelColumns(), await get(base + '/channels')));
      },
    };
  },
};
