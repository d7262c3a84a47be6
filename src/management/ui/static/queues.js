// Queues: one paged, sorted, filtered API call per refresh
// (/api/queues?page=&page_size=&name=&use_regex=&sort=&sort_reverse=), so
// ten thousand queues cost one page of rows; and the add-queue form.

import { get, put, enc, ApiError } from './api.js';
import { h, fill, table, fmtNum, fmtRate, rate, link, field, input, select, onSubmit, parseArgs } from './dom.js';

/** Paging and sorting state of a list, kept across refreshes. */
export function listState(defaultSort) {
  return { page: 1, size: 100, name: '', regex: false, sort: defaultSort, reverse: false };
}

/** The query string of a list state. */
export function listQuery(st) {
  const q = new URLSearchParams({ page: String(st.page), page_size: String(st.size) });
  if (st.name) { q.set('name', st.name); q.set('use_regex', String(st.regex)); }
  if (st.sort) { q.set('sort', st.sort); q.set('sort_reverse', String(st.reverse)); }
  return q.toString();
}

/** Fetch one page; a page past the end (the list shrank) falls back to page 1. */
export async function fetchPage(base, st) {
  try {
    return await get(base + '?' + listQuery(st));
  } catch (e) {
    if (e instanceof ApiError && e.status === 400 && st.page > 1) {
      st.page = 1;
      return get(base + '?' + listQuery(st));
    }
    throw e;
  }
}

/** Filter box, regex switch, page size, and the pager under a list. */
export function listControls(what, st, reload) {
  const name = h('input', { type: 'search', name: 'filter', value: st.name, 'aria-label': 'Filter ' + what + ' by name' });
  const regex = h('input', { type: 'checkbox', name: 'regex', checked: st.regex });
  const size = select('page_size', ['10', '50', '100', '500'], String(st.size));
  size.setAttribute('aria-label', 'Rows per page');
  const form = h('form', { class: 'inline', role: 'search' },
    h('label', {}, 'Filter by name', name),
    h('label', {}, h('span', {}, 'Regex'), regex),
    h('label', {}, 'Per page', size),
    h('button', { type: 'submit' }, 'Apply'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    st.name = name.value; st.regex = regex.checked; st.size = Number(size.value); st.page = 1;
    reload();
  });
  return form;
}

export function pager(st, res, reload) {
  const go = (p) => () => { st.page = p; reload(); };
  return h('div', { class: 'pager' },
    h('button', { type: 'button', class: 'secondary', disabled: res.page <= 1, onclick: go(res.page - 1) }, 'Previous page'),
    h('span', {}, `Page ${res.page} of ${res.page_count} — ${fmtNum(res.filtered_count)} shown of ${fmtNum(res.total_count)}`),
    h('button', { type: 'button', class: 'secondary', disabled: res.page >= res.page_count, onclick: go(res.page + 1) }, 'Next page'));
}

/** Clicking a sortable header: sort by it, or reverse if it already is. */
export function sorter(st, reload) {
  return {
    key: st.sort, reverse: st.reverse,
    on: (k) => { if (st.sort === k) st.reverse = !st.reverse; else { st.sort = k; st.reverse = false; } reload(); },
  };
}

const state = listState('name');

export function page(ctx) {
  const list = h('div', { id: 'queue-list' });
  const reload = () => ctx.refresh();
  fill(ctx.main, h('h1', {}, 'Queues'),
    h('section', { 'aria-labelledby': 'h-ql' }, h('h2', { id: 'h-ql' }, 'All queues'), listControls('queues', state, reload), list),
    addForm(ctx));
  return {
    async update() {
      const v = ctx.vhost();
      const res = await fetchPage(v ? '/api/queues/' + enc(v) : '/api/queues', state);
      const features = (q) => [q.durable ? 'D' : '', q.auto_delete ? 'AD' : '', q.exclusive ? 'Excl' : '',
        Object.keys(q.arguments || {}).length ? 'Args' : '', q.policy ? 'Policy ' + q.policy : ''].filter(Boolean).join(' ');
      fill(list, table('Queues', [
        { label: 'Virtual host', cell: (q) => q.vhost, sort: 'vhost' },
        { label: 'Name', cell: (q) => link('#/queues/' + enc(q.vhost) + '/' + enc(q.name), q.name), sort: 'name' },
        { label: 'Type', cell: (q) => q.type },
        { label: 'Features', cell: features },
        { label: 'State', cell: (q) => q.state, sort: 'state' },
        { label: 'Ready', cell: (q) => fmtNum(q.messages_ready), num: true, sort: 'messages_ready' },
        { label: 'Unacked', cell: (q) => fmtNum(q.messages_unacknowledged), num: true, sort: 'messages_unacknowledged' },
        { label: 'Total', cell: (q) => fmtNum(q.messages), num: true, sort: 'messages' },
        { label: 'Incoming', cell: (q) => fmtRate(rate(q.message_stats, 'publish')), num: true, sort: 'message_stats.publish_details.rate' },
        { label: 'Deliver / get', cell: (q) => fmtRate(rate(q.message_stats, 'deliver_get')), num: true, sort: 'message_stats.deliver_get_details.rate' },
        { label: 'Ack', cell: (q) => fmtRate(rate(q.message_stats, 'ack')), num: true, sort: 'message_stats.ack_details.rate' },
        { label: 'Consumers', cell: (q) => fmtNum(q.consumers), num: true, sort: 'consumers' },
      ], res.items, sorter(state, reload)), pager(state, res, reload));
    },
  };
}

function addForm(ctx) {
  const vhost = input('vhost', { value: ctx.vhost() || '/', required: true });
  const name = input('name', { required: true });
  const durable = select('durable', [['true', 'Durable'], ['false', 'Transient']], 'true');
  const autoDelete = select('auto_delete', [['false', 'No'], ['true', 'Yes']], 'false');
  const type = select('x-queue-type', [['classic', 'Classic'], ['quorum', 'Quorum']], 'classic');
  const args = h('textarea', { name: 'arguments', rows: 3, placeholder: 'x-max-length=1000\nx-message-ttl=60000' });
  const form = h('form', { class: 'grid', id: 'add-queue' },
    field('Virtual host', vhost), field('Name', name), field('Type', type), field('Durability', durable),
    field('Auto delete', autoDelete), field('Arguments (key=value per line, or JSON)', args),
    h('div', { class: 'full' }, h('button', { type: 'submit' }, 'Add queue')));
  return h('section', { 'aria-labelledby': 'h-addq' }, h('h2', { id: 'h-addq' }, 'Add a new queue'),
    onSubmit(form, async () => {
      const a = parseArgs(args.value);
      if (type.value !== 'classic') a['x-queue-type'] = type.value;
      await put('/api/queues/' + enc(vhost.value) + '/' + enc(name.value), {
        durable: durable.value === 'true', auto_delete: autoDelete.value === 'true', arguments: a,
      });
      const made = name.value;
      name.value = '';
      await ctx.refresh();
      return 'Queue ' + made + ' declared.';
    }));
}
