// The shell of the UI: login, the header (pages, virtual host, refresh
// interval, log out), the hash router and the refresh loop. Each page module
// exports page(ctx) -> {update()}; update fetches and redraws the page's
// data, once per refresh, and its errors are shown in words in the status
// box rather than thrown.

import { api, ApiError, session, saveSession, clearSession, get } from './api.js';
import { h, fill, msg, field } from './dom.js';
import * as overview from './overview.js';
import * as queues from './queues.js';
import * as queue from './queue.js';
import * as exchanges from './exchanges.js';
import * as connections from './connections.js';
import * as cluster from './cluster.js';
import * as admin from './admin.js';

const MGMT_TAGS = ['management', 'policymaker', 'monitoring', 'administrator'];
const $ = (id) => document.getElementById(id);
let current = null;
let generation = 0;
let timer = null;

/** Show an error (or clear the status box with null). */
export function showError(e) {
  const box = $('status');
  if (!e) { fill(box); return; }
  fill(box, msg('error', e instanceof Error ? e.message : String(e)));
}

function routeOf(hash) {
  const parts = hash.replace(/^#\/?/, '').split('/').filter((p) => p !== '').map((p) => {
    try { return decodeURIComponent(p); } catch (_) { return p; }
  });
  const [name, ...args] = parts;
  switch (name || '') {
    case '': return { nav: '#/', mod: overview, args };
    case 'queues': return { nav: '#/queues', mod: args.length >= 2 ? queue : queues, args };
    case 'exchanges': return { nav: '#/exchanges', mod: args.length >= 2 ? exchanges.one : exchanges.list, args };
    case 'connections': return { nav: '#/connections', mod: args.length >= 1 ? connections.one : connections.list, args };
    case 'channels': return { nav: '#/channels', mod: connections.channels, args };
    case 'cluster': return { nav: '#/cluster', mod: cluster, args };
    case 'admin': return { nav: '#/admin', mod: admin, args };
    default: return null;
  }
}

function vhost() {
  return $('vhost').value;
}

async function refreshOnce(gen) {
  if (!current || gen !== generation) return;
  try {
    await current.update();
    if (gen === generation) showError(null);
  } catch (e) {
    if (gen !== generation) return;
    if (e instanceof ApiError && e.status === 401 && !(await stillLoggedIn())) return;
    showError(e);
  }
}

async function stillLoggedIn() {
  try {
    await get('/api/whoami');
    return true;
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      logout('Your login is no longer valid: ' + e.message);
      return false;
    }
    return true;
  }
}

function schedule() {
  clearInterval(timer);
  const ms = Number($('refresh').value);
  sessionStorage.setItem('stablemq-refresh', String(ms));
  if (ms > 0) {
    const gen = generation;
    timer = setInterval(() => refreshOnce(gen), ms);
  }
}

async function render() {
  if (!session()) { showLogin(); return; }
  const gen = ++generation;
  clearInterval(timer);
  showError(null);
  const main = $('main');
  const route = routeOf(location.hash);
  for (const a of document.querySelectorAll('#nav a')) {
    if (route && a.getAttribute('href') === route.nav) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (!route) {
    current = null;
    fill(main, h('h1', {}, 'Not found'), msg('error', 'There is no page at ' + location.hash + '.'));
    return;
  }
  fill(main);
  const ctx = { main, args: route.args, vhost, refresh: () => refreshOnce(gen), reloadVhosts: loadVhosts };
  try {
    current = route.mod.page(ctx);
  } catch (e) {
    current = null;
    showError(e);
    return;
  }
  await refreshOnce(gen);
  if (gen === generation) schedule();
}

async function loadVhosts() {
  const sel = $('vhost');
  const keep = sel.value || sessionStorage.getItem('stablemq-vhost') || '';
  let list = [];
  try {
    list = await get('/api/vhosts');
  } catch (e) {
    showError(e);
  }
  fill(sel, h('option', { value: '' }, 'All'), list.map((v) => h('option', { value: v.name }, v.name)));
  sel.value = list.some((v) => v.name === keep) ? keep : '';
}

/** Log out: forget the credentials and show the login form. */
export function logout(why) {
  clearSession();
  clearInterval(timer);
  current = null;
  generation++;
  showLogin(why);
}

function showLogin(why) {
  $('top').hidden = true;
  showError(null);
  const user = h('input', { type: 'text', name: 'username', autocomplete: 'username', required: true, autofocus: true });
  const pass = h('input', { type: 'password', name: 'password', autocomplete: 'current-password', required: true });
  const out = h('div', { 'aria-live': 'assertive' }, why ? msg('warn', why) : '');
  const form = h('form', { id: 'login-form' }, field('Username', user), field('Password', pass),
    h('button', { type: 'submit' }, 'Log in'), out);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const name = user.value;
    const header = 'Basic ' + btoa(unescape(encodeURIComponent(name + ':' + pass.value)));
    try {
      const me = await api('GET', '/api/whoami', undefined, { auth: header });
      const tags = Array.isArray(me.tags) ? me.tags : String(me.tags || '').split(',');
      if (!tags.some((t) => MGMT_TAGS.includes(t))) {
        fill(out, msg('error', 'Not management user: ' + name + ' has no management, monitoring or administrator tag.'));
        return;
      }
      saveSession(name, pass.value, tags);
      await start();
    } catch (e) {
      fill(out, msg('error', e.message));
    }
  });
  fill($('main'), h('div', { class: 'login' }, h('h1', {}, 'StableMQ Management'), form));
  user.focus();
}

async function start() {
  const s = session();
  $('top').hidden = false;
  fill($('who'), 'User ', h('strong', {}, s.user));
  await loadVhosts();
  try {
    const cn = await get('/api/cluster-name');
    fill($('cluster-name'), cn.name);
  } catch (_) {
    fill($('cluster-name'));
  }
  await render();
}

function init() {
  $('logout').addEventListener('click', () => logout('You have logged out.'));
  $('refresh').value = sessionStorage.getItem('stablemq-refresh') || '5000';
  $('refresh').addEventListener('change', () => { schedule(); if (Number($('refresh').value) > 0) refreshOnce(generation); });
  $('vhost').addEventListener('change', () => {
    sessionStorage.setItem('stablemq-vhost', vhost());
    render();
  });
  window.addEventListener('hashchange', () => { render(); $('main').focus(); });
  // A last guard: nothing reaches the console as an uncaught error.
  window.addEventListener('unhandledrejection', (ev) => { ev.preventDefault(); showError(ev.reason); });
  window.addEventListener('error', (ev) => { ev.preventDefault(); showError(ev.error || ev.message); });
  if (session()) start(); else showLogin();
}

init();
