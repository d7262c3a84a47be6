// Admin: users (add, tags, password, delete), virtual hosts, permissions,
// topic permissions, policies and virtual host limits. Each list is one API
// call per refresh; every action is the management API's own endpoint.

import { get, put, del, enc, ApiError } from './api.js';
import { h, fill, table, tags, field, input, select, onSubmit, parseArgs, msg } from './dom.js';

function section(id, title, ...body) {
  return h('section', { 'aria-labelledby': 'h-' + id, id: 'admin-' + id }, h('h2', { id: 'h-' + id }, title), ...body);
}

function delButton(ctx, label, path, confirmText) {
  const out = h('span', { 'aria-live': 'polite' });
  const btn = h('button', { type: 'button', class: 'secondary', onclick: async () => {
    if (confirmText && !window.confirm(confirmText)) return;
    try { await del(path); await ctx.refresh(); } catch (e) { fill(out, msg('error', e.message)); }
  } }, 'Delete');
  btn.setAttribute('aria-label', label);
  return h('span', {}, btn, out);
}

function grid(id, rows, submit) {
  return h('form', { class: 'grid', id }, rows, h('div', { class: 'full' }, h('button', { type: 'submit' }, submit)));
}

function userForms(ctx) {
  const name = input('username', { required: true, autocomplete: 'off' });
  const pw = h('input', { type: 'password', name: 'password', autocomplete: 'new-password' });
  const tg = input('tags', { placeholder: 'administrator, monitoring, management, policymaker' });
  const add = onSubmit(grid('add-user', [field('Username', name), field('Password', pw), field('Tags (comma separated)', tg)], 'Add / update user'), async () => {
    const body = { tags: tg.value.split(',').map((t) => t.trim()).filter(Boolean).join(',') };
    if (pw.value) {
      body.password = pw.value;
    } else {
      // Keep the password of an existing user (a PUT without one removes it).
      try {
        const u = await get('/api/users/' + enc(name.value));
        body.password_hash = u.password_hash;
        body.hashing_algorithm = u.hashing_algorithm;
      } catch (e) {
        if (!(e instanceof ApiError && e.status === 404)) throw e;
        throw new Error('A new user needs a password.');
      }
    }
    await put('/api/users/' + enc(name.value), body);
    const made = name.value;
    pw.value = '';
    await ctx.refresh();
    return 'User ' + made + ' saved.';
  });
  return add;
}

function permissionForm(ctx, topic) {
  const user = input('user', { required: true });
  const vhost = input('vhost', { value: ctx.vhost() || '/', required: true });
  const rows = [field('User', user), field('Virtual host', vhost)];
  const pat = (n) => input(n, { value: '.*' });
  const c = pat('configure'), w = pat('write'), r = pat('read'), x = input('exchange', { placeholder: 'empty: every topic exchange' });
  if (topic) rows.push(field('Exchange', x));
  else rows.push(field('Configure regexp', c));
  rows.push(field('Write regexp', w), field('Read regexp', r));
  const id = topic ? 'set-topic-permission' : 'set-permission';
  return onSubmit(grid(id, rows, topic ? 'Set topic permission' : 'Set permission'), async () => {
    const path = (topic ? '/api/topic-permissions/' : '/api/permissions/') + enc(vhost.value) + '/' + enc(user.value);
    await put(path, topic ? { exchange: x.value, write: w.value, read: r.value } : { configure: c.value, write: w.value, read: r.value });
    await ctx.refresh();
    return (topic ? 'Topic permission' : 'Permission') + ' set for ' + user.value + ' in ' + vhost.value + '.';
  });
}

function vhostForm(ctx) {
  const name = input('name', { required: true });
  const desc = input('description');
  const tg = input('tags');
  return onSubmit(grid('add-vhost', [field('Name', name), field('Description', desc), field('Tags', tg)], 'Add virtual host'), async () => {
    await put('/api/vhosts/' + enc(name.value), { description: desc.value, tags: tg.value });
    const made = name.value;
    name.value = '';
    await ctx.refresh();
    if (ctx.reloadVhosts) await ctx.reloadVhosts();
    return 'Virtual host ' + made + ' added.';
  });
}

function policyForm(ctx) {
  const vhost = input('vhost', { value: ctx.vhost() || '/', required: true });
  const name = input('name', { required: true });
  const pattern = input('pattern', { required: true, placeholder: '^amq\\.' });
  const apply = select('apply-to', [['all', 'Exchanges and queues'], ['queues', 'Queues'], ['exchanges', 'Exchanges']], 'all');
  const prio = h('input', { type: 'number', name: 'priority', value: '0' });
  const def = h('textarea', { name: 'definition', rows: 3, placeholder: 'max-length=1000\nmessage-ttl=60000', required: true });
  return onSubmit(grid('add-policy', [field('Virtual host', vhost), field('Name', name), field('Pattern', pattern),
    field('Apply to', apply), field('Priority', prio), field('Definition (key=value per line, or JSON)', def)], 'Add / update policy'), async () => {
    await put('/api/policies/' + enc(vhost.value) + '/' + enc(name.value), {
      pattern: pattern.value, 'apply-to': apply.value, priority: Number(prio.value) || 0, definition: parseArgs(def.value),
    });
    await ctx.refresh();
    return 'Policy ' + name.value + ' saved.';
  });
}

function limitForm(ctx) {
  const vhost = input('vhost', { value: ctx.vhost() || '/', required: true });
  const kind = select('limit', [['max-connections', 'max-connections'], ['max-queues', 'max-queues']], 'max-connections');
  const value = h('input', { type: 'number', name: 'value', required: true });
  return onSubmit(grid('set-limit', [field('Virtual host', vhost), field('Limit', kind), field('Value', value)], 'Set limit'), async () => {
    await put('/api/vhost-limits/' + enc(vhost.value) + '/' + enc(kind.value), { value: Number(value.value) });
    await ctx.refresh();
    return 'Limit ' + kind.value + ' of ' + vhost.value + ' set.';
  });
}

export function page(ctx) {
  const boxes = {};
  for (const k of ['users', 'vhosts', 'perms', 'topic', 'policies', 'limits']) boxes[k] = h('div', { id: 'admin-list-' + k });
  fill(ctx.main, h('h1', {}, 'Admin'),
    section('users', 'Users', boxes.users, h('h3', {}, 'Add or update a user'), userForms(ctx)),
    section('vhosts', 'Virtual hosts', boxes.vhosts, h('h3', {}, 'Add a virtual host'), vhostForm(ctx)),
    section('perms', 'Permissions', boxes.perms, h('h3', {}, 'Set permission'), permissionForm(ctx, false)),
    section('topic', 'Topic permissions', boxes.topic, h('h3', {}, 'Set topic permission'), permissionForm(ctx, true)),
    section('policies', 'Policies', boxes.policies, h('h3', {}, 'Add or update a policy'), policyForm(ctx)),
    section('limits', 'Virtual host limits', boxes.limits, h('h3', {}, 'Set a limit'), limitForm(ctx)));
  return {
    async update() {
      const [users, vhosts, perms, topic, policies, limits] = await Promise.all(
        ['/api/users', '/api/vhosts', '/api/permissions', '/api/topic-permissions', '/api/policies', '/api/vhost-limits'].map(get));
      fill(boxes.users, table('Users', [
        { label: 'Name', cell: (u) => u.name },
        { label: 'Tags', cell: (u) => tags(u.tags) },
        { label: 'Can access virtual hosts', cell: (u) => perms.filter((p) => p.user === u.name).map((p) => p.vhost).join(', ') || 'No access' },
        { label: 'Has password', cell: (u) => (u.password_hash ? 'yes' : 'no') },
        { label: 'Action', cell: (u) => delButton(ctx, 'Delete user ' + u.name, '/api/users/' + enc(u.name), 'Delete user ' + u.name + '?') },
      ], users));
      fill(boxes.vhosts, table('Virtual hosts', [
        { label: 'Name', cell: (v) => v.name },
        { label: 'Description', cell: (v) => v.description || '–' },
        { label: 'Tags', cell: (v) => tags(v.tags) },
        { label: 'Users', cell: (v) => perms.filter((p) => p.vhost === v.name).map((p) => p.user).join(', ') || '–' },
        { label: 'Action', cell: (v) => delButton(ctx, 'Delete virtual host ' + v.name, '/api/vhosts/' + enc(v.name), 'Delete virtual host ' + v.name + ' and everything in it?') },
      ], vhosts));
      fill(boxes.perms, table('Permissions', [
        { label: 'User', cell: (p) => p.user }, { label: 'Virtual host', cell: (p) => p.vhost },
        { label: 'Configure', cell: (p) => p.configure }, { label: 'Write', cell: (p) => p.write }, { label: 'Read', cell: (p) => p.read },
        { label: 'Action', cell: (p) => delButton(ctx, 'Clear permission of ' + p.user + ' in ' + p.vhost, '/api/permissions/' + enc(p.vhost) + '/' + enc(p.user)) },
      ], perms));
      fill(boxes.topic, table('Topic permissions', [
        { label: 'User', cell: (p) => p.user }, { label: 'Virtual host', cell: (p) => p.vhost },
        { label: 'Exchange', cell: (p) => p.exchange || '(all)' }, { label: 'Write', cell: (p) => p.write }, { label: 'Read', cell: (p) => p.read },
        { label: 'Action', cell: (p) => delButton(ctx, 'Clear topic permission of ' + p.user + ' in ' + p.vhost, '/api/topic-permissions/' + enc(p.vhost) + '/' + enc(p.user)) },
      ], topic));
      fill(boxes.policies, table('Policies', [
        { label: 'Virtual host', cell: (p) => p.vhost }, { label: 'Name', cell: (p) => p.name },
        { label: 'Pattern', cell: (p) => p.pattern }, { label: 'Apply to', cell: (p) => p['apply-to'] },
        { label: 'Definition', cell: (p) => JSON.stringify(p.definition) }, { label: 'Priority', cell: (p) => String(p.priority), num: true },
        { label: 'Action', cell: (p) => delButton(ctx, 'Delete policy ' + p.name, '/api/policies/' + enc(p.vhost) + '/' + enc(p.name)) },
      ], policies));
      const limitRows = [];
      for (const l of limits) for (const [k, v] of Object.entries(l.value || {})) limitRows.push({ vhost: l.vhost, k, v });
      fill(boxes.limits, table('Limits', [
        { label: 'Virtual host', cell: (l) => l.vhost }, { label: 'Limit', cell: (l) => l.k }, { label: 'Value', cell: (l) => String(l.v), num: true },
        { label: 'Action', cell: (l) => delButton(ctx, 'Clear limit ' + l.k + ' of ' + l.vhost, '/api/vhost-limits/' + enc(l.vhost) + '/' + enc(l.k)) },
      ], limitRows));
    },
  };
}
