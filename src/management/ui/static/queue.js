// One queue: details, depth and rate charts, consumers, bindings (add and
// remove), publish a message, get messages, purge, delete.

import { get, post, del, enc } from './api.js';
import { h, fill, table, fmtNum, fmtBytes, fmtRate, rate, field, input, select, onSubmit, parseArgs, msg, link } from './dom.js';
import { record, lineChart } from './chart.js';

export function page(ctx) {
  const [vhost, name] = ctx.args;
  const base = '/api/queues/' + enc(vhost) + '/' + enc(name);
  const details = h('div', { id: 'queue-details' });
  const charts = h('div', { class: 'cols' });
  const consumers = h('div', { id: 'queue-consumers' });
  const bindings = h('div', { id: 'queue-bindings' });
  fill(ctx.main,
    h('p', {}, link('#/queues', '← All queues')),
    h('h1', {}, 'Queue ', h('span', { id: 'queue-name' }, name), ' ', h('small', {}, 'in virtual host ' + vhost)),
    h('section', { 'aria-labelledby': 'h-qd' }, h('h2', { id: 'h-qd' }, 'Details'), details),
    h('section', { 'aria-labelledby': 'h-qc' }, h('h2', { id: 'h-qc' }, 'Queued messages and rates'), charts),
    h('section', { 'aria-labelledby': 'h-qcons' }, h('h2', { id: 'h-qcons' }, 'Consumers'), consumers),
    h('section', { 'aria-labelledby': 'h-qb' }, h('h2', { id: 'h-qb' }, 'Bindings'), bindings, bindForm(ctx, vhost, name)),
    publishForm(ctx, vhost, name),
    getForm(ctx, base),
    dangerForms(ctx, base, name));

  return {
    async update() {
      const q = await get(base);
      const ms = q.message_stats || {};
      const args = Object.entries(q.arguments || {}).map(([k, v]) => k + '=' + JSON.stringify(v)).join(', ');
      const row = (k, v) => h('tr', {}, h('th', { scope: 'row' }, k), h('td', {}, v));
      fill(details, h('div', { class: 'table-wrap' }, h('table', { class: 'kv' }, h('tbody', {},
        row('Type', q.type), row('State', q.state),
        row('Features', [q.durable ? 'durable' : 'transient', q.auto_delete ? 'auto-delete' : '', q.exclusive ? 'exclusive' : ''].filter(Boolean).join(', ')),
        row('Arguments', args || '–'), row('Policy', q.policy || '–'),
        row('Ready', h('span', { id: 'q-ready' }, fmtNum(q.messages_ready))),
        row('Unacked', h('span', { id: 'q-unacked' }, fmtNum(q.messages_unacknowledged))),
        row('Total', h('span', { id: 'q-total' }, fmtNum(q.messages))),
        row('Message bytes', fmtBytes(q.message_bytes)), row('Memory', fmtBytes(q.memory)),
        row('Consumers', fmtNum(q.consumers)), row('Consumer capacity', Math.round((q.consumer_capacity || 0) * 100) + ' %'),
        row('Node', q.node)))));
      const hist = record('queue:' + vhost + '/' + name, {
        ready: q.messages_ready || 0, unacked: q.messages_unacknowledged || 0,
        publish: rate(ms, 'publish') || 0, deliver_get: rate(ms, 'deliver_get') || 0,
        ack: rate(ms, 'ack') || 0, redeliver: rate(ms, 'redeliver') || 0,
      });
      fill(charts, lineChart('Queued messages', hist, [['ready', 'Ready'], ['unacked', 'Unacked']]),
        lineChart('Message rates', hist, [['publish', 'Publish'], ['deliver_get', 'Deliver / get'], ['ack', 'Ack'], ['redeliver', 'Redeliver']], '/s'));
      fill(consumers, table('Consumers', [
        { label: 'Consumer tag', cell: (c) => c.consumer_tag },
        { label: 'Channel', cell: (c) => c.channel_details ? link('#/connections/' + enc(c.channel_details.connection_name), c.channel_details.name) : '–' },
        { label: 'Ack required', cell: (c) => (c.ack_required ? 'yes' : 'no') },
        { label: 'Exclusive', cell: (c) => (c.exclusive ? 'yes' : 'no') },
        { label: 'Prefetch', cell: (c) => fmtNum(c.prefetch_count), num: true },
        { label: 'Status', cell: (c) => c.activity_status || (c.active ? 'up' : 'waiting') },
      ], q.consumer_details || []));
      const bs = await get(base + '/bindings');
      fill(bindings, table('Bindings', [
        { label: 'From', cell: (b) => (b.source === '' ? '(default exchange)' : link('#/exchanges/' + enc(vhost) + '/' + enc(b.source), b.source)) },
        { label: 'Routing key', cell: (b) => b.routing_key },
        { label: 'Arguments', cell: (b) => JSON.stringify(b.arguments || {}) },
        { label: 'Action', cell: (b) => (b.source === '' ? '–' : unbindButton(ctx, vhost, b)) },
      ], bs));
    },
  };
}

/** The unbind button of one binding (DELETE /api/bindings/.../props). */
export function unbindButton(ctx, vhost, b) {
  const kind = b.destination_type === 'exchange' ? 'e' : 'q';
  const out = h('span', { 'aria-live': 'polite' });
  const btn = h('button', { type: 'button', class: 'secondary', onclick: async () => {
    try {
      await del('/api/bindings/' + enc(vhost) + '/e/' + enc(b.source) + '/' + kind + '/' + enc(b.destination) + '/' + enc(b.properties_key));
      await ctx.refresh();
    } catch (e) {
      fill(out, msg('error', e.message));
    }
  } }, 'Unbind');
  btn.setAttribute('aria-label', 'Unbind from ' + b.source + ' with key ' + b.routing_key);
  return h('span', {}, btn, out);
}

function bindForm(ctx, vhost, name) {
  const source = input('source', { required: true });
  const key = input('routing_key');
  const args = h('textarea', { name: 'arguments', rows: 2 });
  const form = h('form', { class: 'grid', id: 'bind-form' },
    field('From exchange', source), field('Routing key', key), field('Arguments (key=value or JSON)', args),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Bind')));
  return h('div', {}, h('h3', {}, 'Add binding to this queue'), onSubmit(form, async () => {
    await post('/api/bindings/' + enc(vhost) + '/e/' + enc(source.value) + '/q/' + enc(name),
      { routing_key: key.value, arguments: parseArgs(args.value) });
    await ctx.refresh();
    return 'Bound to ' + source.value + '.';
  }));
}

/** The publish form; `exchange` '' publishes to the default exchange with key `queue`. */
export function publishForm(ctx, vhost, queue, exchange = '') {
  const key = input('routing_key', { value: queue || '' });
  const mode = select('delivery_mode', [['1', '1 - Non-persistent'], ['2', '2 - Persistent']], '1');
  const headers = h('textarea', { name: 'headers', rows: 2, placeholder: 'key=value per line' });
  const props = h('textarea', { name: 'properties', rows: 2, placeholder: 'content_type=text/plain' });
  const payload = h('textarea', { name: 'payload', rows: 4 });
  const enc64 = select('payload_encoding', [['string', 'String'], ['base64', 'Base64']], 'string');
  const rows = [
    queue ? [] : field('Routing key', key),
    field('Delivery mode', mode), field('Headers', headers), field('Properties', props),
    field('Payload', payload), field('Payload encoding', enc64),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Publish message')),
  ];
  const form = h('form', { class: 'grid', id: 'publish-form' }, rows);
  return h('section', { 'aria-labelledby': 'h-pub' }, h('h2', { id: 'h-pub' }, 'Publish message'),
    queue ? h('p', {}, 'Published through the default exchange with routing key ' + queue + '.') : '',
    onSubmit(form, async () => {
      const properties = parseArgs(props.value);
      properties.delivery_mode = Number(mode.value);
      const hd = parseArgs(headers.value);
      if (Object.keys(hd).length) properties.headers = hd;
      const res = await post('/api/exchanges/' + enc(vhost) + '/' + enc(exchange || 'amq.default') + '/publish', {
        properties, routing_key: queue || key.value, payload: payload.value, payload_encoding: enc64.value,
      });
      await ctx.refresh();
      return res && res.routed ? 'Message published.' : 'Message published, but not routed to any queue.';
    }));
}

function getForm(ctx, base) {
  const ack = select('ackmode', [
    ['ack_requeue_true', 'Nack message requeue true'],
    ['ack_requeue_false', 'Automatic ack'],
    ['reject_requeue_true', 'Reject requeue true'],
    ['reject_requeue_false', 'Reject requeue false'],
  ], 'ack_requeue_true');
  const encoding = select('encoding', [['auto', 'Automatic string/base64'], ['base64', 'Base64']], 'auto');
  const count = h('input', { type: 'number', name: 'count', value: '1', min: '1', max: '1000' });
  const out = h('div', { id: 'got-messages' });
  const form = h('form', { class: 'grid', id: 'get-form' },
    field('Ack mode', ack), field('Encoding', encoding), field('Messages', count),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Get messages')));
  return h('section', { 'aria-labelledby': 'h-get' }, h('h2', { id: 'h-get' }, 'Get messages'),
    h('p', {}, 'Getting messages is a destructive action unless they are requeued.'),
    onSubmit(form, async () => {
      const list = await post(base + '/get', { count: Number(count.value) || 1, ackmode: ack.value, encoding: encoding.value, truncate: 50000 });
      fill(out, list.length ? list.map((m, i) => h('div', { class: 'table-wrap' }, h('table', { class: 'kv got' }, h('caption', {}, 'Message ' + (i + 1)), h('tbody', {},
        h('tr', {}, h('th', { scope: 'row' }, 'Exchange'), h('td', {}, m.exchange || '(default)')),
        h('tr', {}, h('th', { scope: 'row' }, 'Routing key'), h('td', {}, m.routing_key)),
        h('tr', {}, h('th', { scope: 'row' }, 'Redelivered'), h('td', {}, m.redelivered ? 'yes' : 'no')),
        h('tr', {}, h('th', { scope: 'row' }, 'Properties'), h('td', {}, JSON.stringify(m.properties || {}))),
        h('tr', {}, h('th', { scope: 'row' }, 'Payload'), h('td', {}, h('small', {}, fmtNum(m.payload_bytes) + ' bytes, encoding ' + m.payload_encoding),
          h('pre', { class: 'payload' }, m.payload))))))) : msg('warn', 'Queue is empty.'));
      await ctx.refresh();
      return list.length + ' message' + (list.length === 1 ? '' : 's') + ' fetched.';
    }), out);
}

function dangerForms(ctx, base, name) {
  const purge = onSubmit(h('form', { class: 'inline', id: 'purge-form' }, h('button', { type: 'submit', class: 'danger' }, 'Purge messages')), async () => {
    if (!window.confirm('Purge every ready message of queue ' + name + '?')) return '';
    await del(base + '/contents');
    await ctx.refresh();
    return 'Queue ' + name + ' purged.';
  });
  const ifEmpty = h('input', { type: 'checkbox', name: 'if-empty' });
  const ifUnused = h('input', { type: 'checkbox', name: 'if-unused' });
  const remove = onSubmit(h('form', { class: 'inline', id: 'delete-form' },
    h('label', {}, 'Only if empty', ifEmpty), h('label', {}, 'Only if unused', ifUnused),
    h('button', { type: 'submit', class: 'danger' }, 'Delete queue')), async () => {
    if (!window.confirm('Delete queue ' + name + '?')) return '';
    const q = new URLSearchParams();
    if (ifEmpty.checked) q.set('if-empty', 'true');
    if (ifUnused.checked) q.set('if-unused', 'true');
    await del(base + (q.toString() ? '?' + q : ''));
    location.hash = '#/queues';
    return 'Queue ' + name + ' deleted.';
  });
  return h('section', { 'aria-labelledby': 'h-danger' }, h('h2', { id: 'h-danger' }, 'Purge or delete'), purge, remove);
}
