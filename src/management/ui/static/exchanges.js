// Exchanges: the paged list and add form; one exchange's page with its
// bindings (add and remove), publish, delete.

import { get, put, post, del, enc } from './api.js';
import { h, fill, table, fmtRate, rate, link, field, input, select, onSubmit, parseArgs } from './dom.js';
import { listState, listControls, fetchPage, pager, sorter } from './queues.js';
import { unbindButton, publishForm } from './queue.js';

const state = listState('name');
const exName = (n) => (n === '' ? '(AMQP default)' : n);

export const list = {
  page(ctx) {
    const box = h('div', { id: 'exchange-list' });
    const reload = () => ctx.refresh();
    fill(ctx.main, h('h1', {}, 'Exchanges'),
      h('section', { 'aria-labelledby': 'h-el' }, h('h2', { id: 'h-el' }, 'All exchanges'), listControls('exchanges', state, reload), box),
      addForm(ctx));
    return {
      async update() {
        const v = ctx.vhost();
        const res = await fetchPage(v ? '/api/exchanges/' + enc(v) : '/api/exchanges', state);
        fill(box, table('Exchanges', [
          { label: 'Virtual host', cell: (x) => x.vhost, sort: 'vhost' },
          { label: 'Name', cell: (x) => link('#/exchanges/' + enc(x.vhost) + '/' + enc(x.name === '' ? 'amq.default' : x.name), exName(x.name)), sort: 'name' },
          { label: 'Type', cell: (x) => x.type, sort: 'type' },
          { label: 'Features', cell: (x) => [x.durable ? 'D' : '', x.auto_delete ? 'AD' : '', x.internal ? 'I' : ''].filter(Boolean).join(' ') },
          { label: 'Message rate in', cell: (x) => fmtRate(rate(x.message_stats, 'publish_in')), num: true },
          { label: 'Message rate out', cell: (x) => fmtRate(rate(x.message_stats, 'publish_out')), num: true },
        ], res.items, sorter(state, reload)), pager(state, res, reload));
      },
    };
  },
};

function addForm(ctx) {
  const vhost = input('vhost', { value: ctx.vhost() || '/', required: true });
  const name = input('name', { required: true });
  const type = select('type', ['direct', 'fanout', 'headers', 'topic'], 'direct');
  const durable = select('durable', [['true', 'Durable'], ['false', 'Transient']], 'true');
  const autoDelete = select('auto_delete', [['false', 'No'], ['true', 'Yes']], 'false');
  const internal = select('internal', [['false', 'No'], ['true', 'Yes']], 'false');
  const args = h('textarea', { name: 'arguments', rows: 2, placeholder: 'alternate-exchange=my-ae' });
  const form = h('form', { class: 'grid', id: 'add-exchange' }, field('Virtual host', vhost), field('Name', name),
    field('Type', type), field('Durability', durable), field('Auto delete', autoDelete), field('Internal', internal),
    field('Arguments', args), h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Add exchange')));
  return h('section', { 'aria-labelledby': 'h-addx' }, h('h2', { id: 'h-addx' }, 'Add a new exchange'),
    onSubmit(form, async () => {
      await put('/api/exchanges/' + enc(vhost.value) + '/' + enc(name.value), {
        type: type.value, durable: durable.value === 'true', auto_delete: autoDelete.value === 'true',
        internal: internal.value === 'true', arguments: parseArgs(args.value),
      });
      const made = name.value;
      name.value = '';
      await ctx.refresh();
      return 'Exchange ' + made + ' declared.';
    }));
}

export const one = {
  page(ctx) {
    const [vhost, name] = ctx.args;
    const base = '/api/exchanges/' + enc(vhost) + '/' + enc(name);
    const details = h('div', { id: 'exchange-details' });
    const source = h('div', { id: 'exchange-bindings' });
    const dest = h('div');
    const kind = select('destination_type', [['q', 'To queue'], ['e', 'To exchange']], 'q');
    const to = input('destination', { required: true });
    const key = input('routing_key');
    const args = h('textarea', { name: 'arguments', rows: 2 });
    const bind = onSubmit(h('form', { class: 'grid', id: 'exchange-bind' }, field('Destination type', kind), field('Destination', to),
      field('Routing key', key), field('Arguments', args), h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Bind'))), async () => {
      await post('/api/bindings/' + enc(vhost) + '/e/' + enc(name) + '/' + kind.value + '/' + enc(to.value),
        { routing_key: key.value, arguments: parseArgs(args.value) });
      await ctx.refresh();
      return 'Bound ' + to.value + '.';
    });
    const remove = onSubmit(h('form', { class: 'inline', id: 'delete-exchange' },
      h('button', { type: 'submit', class: 'danger' }, 'Delete this exchange')), async () => {
      if (!window.confirm('Delete exchange ' + name + '?')) return '';
      await del(base);
      location.hash = '#/exchanges';
      return 'Deleted.';
    });
    fill(ctx.main, h('p', {}, link('#/exchanges', '← All exchanges')),
      h('h1', {}, 'Exchange ', exName(name === 'amq.default' ? '' : name), ' ', h('small', {}, 'in virtual host ' + vhost)),
      h('section', { 'aria-labelledby': 'h-xd' }, h('h2', { id: 'h-xd' }, 'Details'), details),
      h('section', { 'aria-labelledby': 'h-xb' }, h('h2', { id: 'h-xb' }, 'Bindings from this exchange'), source,
        h('h3', {}, 'Add binding from this exchange'), bind),
      h('section', { 'aria-labelledby': 'h-xdb' }, h('h2', { id: 'h-xdb' }, 'Bindings to this exchange'), dest),
      publishForm(ctx, vhost, null, name),
      name.startsWith('amq.') ? '' : h('section', { 'aria-labelledby': 'h-xdel' }, h('h2', { id: 'h-xdel' }, 'Delete'), remove));
    const cols = (dir) => [
      { label: dir === 'to' ? 'To' : 'From', cell: (b) => (dir === 'to' ? b.destination + ' (' + b.destination_type + ')' : b.source) },
      { label: 'Routing key', cell: (b) => b.routing_key },
      { label: 'Arguments', cell: (b) => JSON.stringify(b.arguments || {}) },
      { label: 'Action', cell: (b) => unbindButton(ctx, vhost, b) },
    ];
    return {
      async update() {
        const x = await get(base);
        const row = (k, v) => h('tr', {}, h('th', { scope: 'row' }, k), h('td', {}, v));
        fill(details, h('table', { class: 'kv' }, h('tbody', {}, row('Type', x.type),
          row('Features', [x.durable ? 'durable' : 'transient', x.auto_delete ? 'auto-delete' : '', x.internal ? 'internal' : ''].filter(Boolean).join(', ')),
          row('Arguments', JSON.stringify(x.arguments || {})), row('Policy', x.policy || '–'),
          row('Message rate in', fmtRate(rate(x.message_stats, 'publish_in'))),
          row('Message rate out', fmtRate(rate(x.message_stats, 'publish_out'))))));
        if (name === 'amq.default') {
          fill(source, 'The default exchange is bound to every queue by its name.');
          fill(dest);
          return;
        }
        fill(source, table('Bindings from', cols('to'), await get(base + '/bindings/source')));
        fill(dest, table('Bindings to', cols('from'), await get(base + '/bindings/destination')));
      },
    };
  },
};
