// Small helpers to build the page: elements, tables, forms and numbers.

/** Create an element: h('a', {href: '#'}, 'text', child...). */
export function h(tag, attrs = {}, ...children) {
  const svg = tag.startsWith('svg:');
  const el = svg ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function fmtNum(n) {
  if (n === undefined || n === null || Number.isNaN(n)) return '–';
  return Number(n).toLocaleString('en-US');
}

export function fmtRate(r) {
  if (r === undefined || r === null) return '–';
  return (Math.round(r * 10) / 10).toLocaleString('en-US') + '/s';
}

export function fmtBytes(b) {
  if (b === undefined || b === null) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = Number(b);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : v) + ' ' + units[i];
}

export function fmtMs(ms) {
  if (ms === undefined || ms === null) return '–';
  if (ms < 1000) return ms + ' ms ago';
  return Math.round(ms / 100) / 10 + ' s ago';
}

/** A rate out of a message_stats object: rate(ms, 'publish'). */
export function rate(ms, key) {
  return ms && ms[key + '_details'] ? ms[key + '_details'].rate : undefined;
}

/**
 * A table. columns: [{label, cell(row) -> Node|string, num, sort}] ; rows:
 * array. `sort`: {key, reverse, on(key)} makes headers with a sort field
 * buttons.
 */
export function table(caption, columns, rows, sort) {
  const head = h('tr', {}, columns.map((c) => {
    const attrs = { scope: 'col', class: c.num ? 'num' : undefined };
    if (sort && c.sort) {
      const active = sort.key === c.sort;
      attrs['aria-sort'] = active ? (sort.reverse ? 'descending' : 'ascending') : 'none';
      const arrow = active ? (sort.reverse ? ' ▼' : ' ▲') : '';
      return h('th', attrs, h('button', { type: 'button', class: 'sort', onclick: () => sort.on(c.sort) }, c.label + arrow));
    }
    return h('th', attrs, c.label);
  }));
  const body = rows.length
    ? rows.map((r) => h('tr', {}, columns.map((c) => h('td', { class: c.num ? 'num' : undefined }, c.cell(r)))))
    : [h('tr', {}, h('td', { colspan: columns.length, class: 'empty' }, 'None.'))];
  return h('div', { class: 'table-wrap' },
    h('table', {}, h('caption', { class: 'skip' }, caption), h('thead', {}, head), h('tbody', {}, body)));
}

let idSeq = 0;
/** A labelled input row for a form.grid: [label, control]. */
export function field(label, control) {
  if (!control.id) control.id = 'f' + (++idSeq);
  return [h('label', { for: control.id }, label), control];
}

export const input = (name, attrs = {}) => h('input', { type: 'text', name, ...attrs });

export function select(name, options, value) {
  return h('select', { name }, options.map((o) => {
    const [v, t] = Array.isArray(o) ? o : [o, o];
    return h('option', { value: v, selected: v === value }, t);
  }));
}

/** A message box: kind is 'error', 'ok' or 'warn'. */
export function msg(kind, text) {
  return h('div', { class: 'msg ' + kind, role: kind === 'error' ? 'alert' : 'status' }, text);
}

/**
 * Wire a form: on submit run `action(formData)`; show its result or error in
 * the form's output box. `action` returns a success text.
 */
export function onSubmit(form, action) {
  const out = h('div', { class: 'form-result', 'aria-live': 'polite' });
  form.append(out);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const btn = form.querySelector('button[type=submit]');
    if (btn) btn.disabled = true;
    try {
      const text = await action(new FormData(form), form);
      fill(out, text ? msg('ok', text) : '');
    } catch (e) {
      fill(out, msg('error', e && e.message ? e.message : String(e)));
    } finally {
      if (btn) btn.disabled = false;
    }
  });
  return form;
}

/** Parse "k=v" lines or a JSON object into an arguments object. */
export function parseArgs(text) {
  const t = (text || '').trim();
  if (!t) return {};
  if (t.startsWith('{')) {
    let v;
    try { v = JSON.parse(t); } catch (e) { throw new Error('Arguments are not valid JSON: ' + e.message); }
    return v;
  }
  const out = {};
  for (const line of t.split(/\n/)) {
    if (!line.trim()) continue;
    const i = line.indexOf('=');
    if (i < 1) throw new Error('Each argument line must be key=value: ' + line);
    const k = line.slice(0, i).trim();
    const raw = line.slice(i + 1).trim();
    out[k] = /^-?\d+$/.test(raw) ? Number(raw) : raw === 'true' ? true : raw === 'false' ? false : raw;
  }
  return out;
}

export function tags(list) {
  const arr = Array.isArray(list) ? list : String(list || '').split(',').filter(Boolean);
  return arr.length ? arr.map((t) => h('span', { class: 'tag' }, t)) : '–';
}

export function link(href, text) {
  return h('a', { href }, text);
}
