// The aware web console: plain ES module, no build step. Reads the /v1/console/* routes,
// refreshes what it shows when /v1/console/events hints that something changed, and sends the
// bearer token (kept in sessionStorage) as a header: no cookies.

const $ = (sel, root = document) => root.querySelector(sel);
const view = () => $('#view');
const TOKEN_KEY = 'aware.token';

function esc(v) {
  return String(v ?? '').replace(/[&<>"']/g, (c) => ({
    '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
  })[c]);
}

function fmtTime(ms) {
  if (ms === undefined || ms === null) return '';
  const d = new Date(ms);
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function ago(ms, now) {
  if (ms === undefined || ms === null) return '';
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}

const enc = encodeURIComponent;

// ---- API ----------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function authHeaders() {
  const t = sessionStorage.getItem(TOKEN_KEY);
  return t ? { Authorization: `Bearer ${t}` } : {};
}

async function api(path, { method = 'GET', body } = {}) {
  const headers = { Accept: 'application/json', ...authHeaders() };
  const init = { method, headers, credentials: 'omit' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  let data = null;
  try { data = await r.json(); } catch { data = null; }
  if (!r.ok) {
    const e = data?.error ?? {};
    throw new ApiError(r.status, e.code ?? 'http_error', e.message ?? `HTTP ${r.status}`);
  }
  return data;
}

// ---- token prompt -------------------------------------------------------------------------

let tokenWaiters = null;

function askToken(message) {
  const dlg = $('#token-dialog');
  const err = $('#token-error');
  err.hidden = !message;
  err.textContent = message ?? '';
  if (!dlg.open) dlg.showModal();
  $('#token-input').focus();
  if (!tokenWaiters) tokenWaiters = [];
  return new Promise((resolve) => tokenWaiters.push(resolve));
}

$('#token-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const value = $('#token-input').value.trim();
  if (!value) return;
  sessionStorage.setItem(TOKEN_KEY, value);
  try {
    await api('/v1/console/overview');
  } catch (e) {
    if (e.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      $('#token-error').hidden = false;
      $('#token-error').textContent =
        'The gateway refused this token (401 unauthorized). Check it and try again.';
      $('#token-input').select();
      return;
    }
  }
  $('#token-dialog').close();
  $('#token-input').value = '';
  $('#signout').hidden = false;
  const w = tokenWaiters ?? [];
  tokenWaiters = null;
  w.forEach((f) => f());
  startLive();
});

$('#token-dialog').addEventListener('cancel', (ev) => ev.preventDefault());

$('#signout').addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN_KEY);
  $('#signout').hidden = true;
  location.reload();
});

// Runs `f`; on 401 asks for the token and tries again once it was accepted.
async function withAuth(f) {
  for (;;) {
    try {
      return await f();
    } catch (e) {
      if (e.status !== 401) throw e;
      const had = sessionStorage.getItem(TOKEN_KEY);
      sessionStorage.removeItem(TOKEN_KEY);
      await askToken(had ? 'The stored token was refused (401 unauthorized).' : null);
    }
  }
}

// ---- confirmation ------------------------------------------------------------------------

function confirmAction(title, html, okLabel = 'Confirm') {
  const dlg = $('#confirm-dialog');
  $('#confirm-title').textContent = title;
  $('#confirm-body').innerHTML = html;
  $('#confirm-ok').textContent = okLabel;
  dlg.returnValue = '';
  dlg.showModal();
  $('#confirm-dialog button[value="cancel"]').focus();
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => resolve(dlg.returnValue === 'ok'), { once: true });
  });
}

function flash(msg) {
  const f = $('#flash');
  f.hidden = !msg;
  f.textContent = msg ?? '';
}

// ---- theme -------------------------------------------------------------------------------

function applyTheme(t) {
  const root = document.documentElement;
  if (t) root.dataset.theme = t; else delete root.dataset.theme;
  const dark = t ? t === 'dark' : matchMedia('(prefers-color-scheme: dark)').matches;
  const b = $('#theme');
  b.setAttribute('aria-pressed', String(dark));
  b.textContent = dark ? 'Light theme' : 'Dark theme';
  if (cy) styleGraph();
}

$('#theme').addEventListener('click', () => {
  const dark = $('#theme').getAttribute('aria-pressed') === 'true';
  const t = dark ? 'light' : 'dark';
  localStorage.setItem('aware.theme', t);
  applyTheme(t);
});

// ---- live hints (SSE over fetch, so the bearer header can be sent) ------------------------

let liveAbort = null;
let refreshTimer = null;

function scheduleRefresh() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    render(true);
    // Keep sampling the counters for the overview's per-minute charts on other pages too.
    if (parseHash().page !== 'overview') api('/v1/console/overview').then(recordSample, () => {});
  }, 100);
}

async function startLive() {
  if (liveAbort) liveAbort.abort();
  const ctl = new AbortController();
  liveAbort = ctl;
  const live = $('#live');
  let delay = 500;
  while (!ctl.signal.aborted) {
    try {
      const r = await fetch('/v1/console/events', {
        headers: { Accept: 'text/event-stream', ...authHeaders() },
        signal: ctl.signal,
        credentials: 'omit',
      });
      if (r.status === 401) { live.textContent = 'not signed in'; live.className = 'live'; return; }
      if (!r.ok || !r.body) throw new Error(`HTTP ${r.status}`);
      live.textContent = 'live';
      live.className = 'live on';
      delay = 500;
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (/^event: ?change$/m.test(block)) scheduleRefresh();
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    live.textContent = 'reconnecting…';
    live.className = 'live';
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 10000);
  }
}

// ---- routing -----------------------------------------------------------------------------

function parseHash() {
  const h = location.hash.replace(/^#\/?/, '');
  const [path, qs] = h.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { page: parts[0] || 'overview', parts, params: new URLSearchParams(qs || '') };
}

function go(hash) {
  if (location.hash === hash) render(); else location.hash = hash;
}

function agentOfKey(key) {
  const m = /^agent:([^:]+):/.exec(key);
  return m ? m[1] : '';
}

function sessionHref(agent, key) {
  return `#/session/${enc(agent)}/${enc(key)}`;
}

let rendering = false;
let again = false;

async function render(fromLive = false) {
  if (rendering) { again = true; return; }
  rendering = true;
  const { page, parts, params } = parseHash();
  document.querySelectorAll('nav a').forEach((a) => {
    if (a.dataset.page === page) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  });
  try {
    await withAuth(async () => {
      if (page === 'sessions') await renderSessions(params, fromLive);
      else if (page === 'graph') await renderGraph(params, fromLive);
      else if (page === 'session') {
        // The console's links say `#/session/<agent>/<key>`; a user types `#/session/<key>`, whose
        // agent is the key's own (`agent:<id>:…`), else the gateway's default.
        const [agent, key] = parts.length >= 3 ? [parts[1], parts[2]] : [agentOfKey(parts[1] ?? ''), parts[1] ?? ''];
        await renderSession(agent, key, params, fromLive);
      }
      else if (page === 'catalog') await renderCatalog(fromLive);
      else await renderOverview(fromLive);
    });
    if (!fromLive) flash(null);
  } catch (e) {
    flash(`${e.code ? e.code + ': ' : ''}${e.message}`);
  } finally {
    rendering = false;
    if (again) { again = false; render(true); }
  }
}

window.addEventListener('hashchange', () => render());

// ---- overview ----------------------------------------------------------------------------

function barChart(title, items, alt = new Set(), { id = '', extra = '' } = {}) {
  const w = 310; const rowH = 20; const labelW = 158;
  const max = Math.max(1, ...items.map(([, v]) => v));
  const h = items.length * rowH + 4;
  const rows = items.map(([label, v], i) => {
    const bw = Math.round(((w - labelW - 50) * v) / max);
    const y = i * rowH + 2;
    return `<text x="0" y="${y + 13}">${esc(label)}</text>` +
      `<rect class="bar${alt.has(label) ? ' alt' : ''}" x="${labelW}" y="${y + 3}" width="${bw}" height="12" rx="2"></rect>` +
      `<text x="${labelW + bw + 4}" y="${y + 13}">${v}</text>`;
  }).join('');
  const desc = items.map(([l, v]) => `${l}: ${v}`).join(', ');
  return `<figure class="chart"${id ? ` id="${id}"` : ''}><figcaption><h3>${esc(title)}</h3></figcaption>` +
    `<svg viewBox="0 0 ${w} ${h}" role="img" aria-label="${esc(title)}: ${esc(desc)}">${rows}</svg>${extra}</figure>`;
}

// The monitor's health: its counters, and when it checks next (engine clock).
function monitorChart(m) {
  if (!m.enabled) {
    return '<figure class="chart" id="monitor-health"><figcaption><h3>Upstream monitor</h3></figcaption>' +
      '<p class="muted">The upstream monitor is off: adopted sessions are not checked.</p></figure>';
  }
  const extra = `<p class="muted">Next tick ${esc(fmtTime(m.nextTickAt))} (engine clock).` +
    `${m.ticksSkipped ? ` <span class="warn">${m.ticksSkipped} tick(s) skipped while the previous one still ran.</span>` : ''}` +
    ' Each adopted session\'s page shows its last check and its misses in a row.</p>';
  return barChart('Upstream monitor', [['ticks', m.ticks], ['ticks skipped', m.ticksSkipped], ['human turns found', m.humanTurns],
    ['missing recorded', m.missing], ['provider timeouts', m.providerTimeouts]],
  new Set(['ticks skipped', 'provider timeouts']), { id: 'monitor-health', extra });
}

// Counter samples taken by this page (on load and on every live hint), for per-minute rates.
const samples = [];

function recordSample(o) {
  const events = Object.values(o.eventsAppended).reduce((s, v) => s + v, 0);
  const sample = { t: Date.now(), events, opened: o.notices.opened, acked: o.notices.acked };
  for (const [kind, n] of Object.entries(o.eventsAppended)) sample[`kind:${kind}`] = n;
  samples.push(sample);
  while (samples.length > 2000) samples.shift();
}

// When this page was loaded: the per-minute charts count from here.
const pageOpened = new Date().toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });

function perMinute(field, minutes = 10) {
  const now = Date.now();
  const buckets = Array(minutes).fill(0);
  for (let i = 1; i < samples.length; i++) {
    const d = (samples[i][field] ?? 0) - (samples[i - 1][field] ?? 0);
    const age = Math.floor((now - samples[i].t) / 60000);
    if (age < minutes && d > 0) buckets[minutes - 1 - age] += d;
  }
  return buckets;
}

// Events per minute by kind: the busiest three kinds of the window, the rest as "other".
function eventsByKindSeries(kinds, minutes = 10) {
  const per = kinds.map((k) => ({ name: k, values: perMinute(`kind:${k}`, minutes) }))
    .map((s) => ({ ...s, total: s.values.reduce((a, b) => a + b, 0) }))
    .filter((s) => s.total > 0)
    .sort((a, b) => b.total - a.total);
  if (!per.length) return [{ name: 'events', values: Array(minutes).fill(0) }];
  const top = per.slice(0, 3).map((s, i) => ({ ...s, cls: `k${i}` }));
  const rest = per.slice(3);
  if (rest.length) {
    top.push({ name: 'other', cls: 'k3', values: Array.from({ length: minutes }, (_, i) => rest.reduce((a, s) => a + s.values[i], 0)) });
  }
  return top;
}

function columnChart(title, series, minutes = 10) {
  const w = 310; const h = 110; const base = 90; const groupW = (w - 20) / minutes;
  const max = Math.max(1, ...series.flatMap((s) => s.values));
  const barW = Math.max(2, (groupW - 4) / series.length);
  let bars = '';
  series.forEach((s, si) => s.values.forEach((v, i) => {
    const bh = Math.round((70 * v) / max);
    bars += `<rect class="bar${s.alt ? ' alt' : ''}${s.cls ? ` ${s.cls}` : ''}" x="${(10 + i * groupW + si * barW).toFixed(1)}" y="${base - bh}" width="${(barW - 1).toFixed(1)}" height="${bh}"><title>${esc(s.name)}: ${v}</title></rect>`;
  }));
  // Up to two series fit a legend inside the chart; more get one below it.
  const legend = series.length > 2 ? '' : series.map((s, i) => `<rect class="bar${s.alt ? ' alt' : ''}" x="${10 + i * 110}" y="98" width="8" height="8"></rect><text x="${22 + i * 110}" y="106">${esc(s.name)}</text>`).join('');
  const below = series.length > 2
    ? `<p class="chart-legend">${series.map((s) => `<span><svg width="10" height="10" aria-hidden="true"><rect class="bar${s.cls ? ` ${s.cls}` : ''}" width="10" height="10"></rect></svg> ${esc(s.name)}</span>`).join(' ')}</p>`
    : '';
  const desc = series.map((s) => `${s.name} per minute, oldest first: ${s.values.join(', ')}`).join('; ');
  // The rates are the changes this page has seen; on a fresh page that is none yet, which must
  // not read as "nothing happened" (the totals below count since the gateway started).
  const quiet = series.every((s) => s.values.every((v) => v === 0))
    ? `<text class="quiet" x="${w / 2}" y="50" text-anchor="middle">no change since this page opened at ${esc(pageOpened)}</text>`
    : '';
  return `<figure class="chart"><figcaption><h3>${esc(title)}</h3></figcaption>` +
    `<svg viewBox="0 0 ${w} ${h}" role="img" aria-label="${esc(title)}: ${esc(desc)}">` +
    `<text x="10" y="10">max ${max}/min</text><line x1="10" x2="${w - 10}" y1="${base}" y2="${base}" stroke="currentColor" opacity=".3"></line>${bars}${quiet}${legend}</svg>${below}</figure>`;
}

// The watch edges a user looks for first: pending ones, then the rest, at most `max`.
function watchRows(g, max = 12) {
  const edges = g.edges.map((e) => ({ ...e, w: g.nodes[e.from], t: g.nodes[e.to] }))
    .sort((a, b) => Number(b.pending) - Number(a.pending));
  const rows = edges.slice(0, max).map((e) => `
    <tr class="${e.pending ? 'pending' : ''}" data-edge="${esc(e.w.key)} -> ${esc(e.t.key)}" data-pending="${e.pending}">
      <td class="mono"><a href="${sessionHref(e.w.agentId, e.w.key)}">${esc(shortKey(e.w.key))}</a></td>
      <td class="mono"><a href="${sessionHref(e.t.agentId, e.t.key)}">${esc(shortKey(e.t.key))}</a></td>
      <td>${esc(e.kind)}${e.implied ? ' (by parent)' : ''}</td><td>${e.pending ? '<span class="badge pending">pending</span>' : ''}</td>
    </tr>`).join('');
  const more = edges.length > max ? `<p class="muted">${edges.length - max} more in the <a href="#/graph">watch graph</a>.</p>` : '';
  return `<section aria-labelledby="watches-h"><h3 id="watches-h">Who watches whom</h3>
    <table id="overview-watches"><thead><tr><th scope="col">Watcher</th><th scope="col">Target</th><th scope="col">Kind</th><th scope="col">Notice</th></tr></thead>
    <tbody>${rows || '<tr><td colspan="4" class="muted">No session watches another yet.</td></tr>'}</tbody></table>${more}</section>`;
}

async function renderOverview() {
  const o = await api('/v1/console/overview');
  const g = await api('/v1/console/graph?depth=1');
  recordSample(o);
  const ev = Object.entries(o.eventsAppended);
  const total = ev.reduce((s, [, v]) => s + v, 0);
  const commitMean = o.store.commits ? (o.store.commitMicrosSum / o.store.commits / 1000).toFixed(2) : '0';
  const card = (v, l) => `<div class="card"><div class="v">${esc(v)}</div><div class="l">${esc(l)}</div></div>`;
  view().innerHTML = `
    <h2>Overview</h2>
    <div class="cards">
      ${card(o.sessions, 'sessions')}
      ${o.pendingNotices !== undefined ? card(o.pendingNotices, 'pending notices') : ''}
      ${card(total, 'events recorded')}
      ${card(o.notices.opened, 'notices opened')}
      ${card(o.notices.acked, 'notices acknowledged')}
      ${card(o.wakes.delivered, 'wakes delivered')}
      ${card(`${commitMean} ms`, 'mean store commit')}
    </div>
    ${watchRows(g)}
    <div class="charts">
      ${columnChart('Events per minute by kind (last 10 min)', eventsByKindSeries(Object.keys(o.eventsAppended)))}
      ${columnChart('Notices per minute (last 10 min)', [{ name: 'opened', values: perMinute('opened'), alt: true }, { name: 'acknowledged', values: perMinute('acked') }])}
      ${barChart('Events recorded by kind', ev)}
      ${barChart('Notices', [['opened', o.notices.opened], ['follow-ups', o.notices.followUps], ['acknowledged', o.notices.acked]], new Set(['opened']))}
      ${monitorChart(o.monitor)}
      ${barChart('Store commits by latency', o.store.commitBuckets.map((b) => [`≤ ${b.leMicros >= 1000 ? b.leMicros / 1000 + ' ms' : b.leMicros + ' µs'}`, b.count]))}
    </div>
    <p class="muted">Figures come from the same counters as <code>/metrics</code> (since the gateway started);
    per-minute rates from the changes this page saw since it opened.</p>`;
}

// ---- sessions table ----------------------------------------------------------------------

const COLS = [
  ['key', 'Key'], ['agentId', 'Agent'], ['kind', 'Kind'], [null, 'Parent'],
  ['stateVersion', 'State version'], ['lastEventAt', 'Last event'],
  ['pendingAsWatcher', 'Pending (as watcher)'], ['pendingAsTarget', 'Pending (on it)'], [null, 'Upstream'],
];

async function renderSessions(params, fromLive) {
  const agent = params.get('agent') ?? '';
  const kind = params.get('kind') ?? '';
  const q = params.get('q') ?? '';
  const sort = params.get('sort') ?? '-updatedAt';
  const offset = Number(params.get('offset') ?? 0);
  const limit = 50;
  const qs = new URLSearchParams({ sort, offset, limit });
  if (agent) qs.set('agent', agent);
  if (kind) qs.set('kind', kind);
  if (q) qs.set('q', q);
  const d = await api(`/v1/console/sessions?${qs}`);
  const active = document.activeElement?.id;
  const sortName = sort.replace(/^-/, '');
  const desc = sort.startsWith('-');
  const head = COLS.map(([k, label]) => {
    if (!k) return `<th scope="col">${label}</th>`;
    const aria = k === sortName ? (desc ? 'descending' : 'ascending') : 'none';
    const next = k === sortName && !desc ? `-${k}` : k;
    return `<th scope="col" aria-sort="${aria}"><button type="button" data-sort="${next}">${label}${k === sortName ? (desc ? ' ▼' : ' ▲') : ''}</button></th>`;
  }).join('');
  const rows = d.sessions.map((s) => `
    <tr class="${s.pendingAsTarget || s.pendingAsWatcher ? 'pending' : ''}" data-key="${esc(s.key)}">
      <td><a href="${sessionHref(s.agentId, s.key)}" class="mono">${esc(s.key)}</a>${s.label ? ` <span class="muted">(${esc(s.label)})</span>` : ''}${s.humanRecent ? ' <span class="badge human">human</span>' : ''}</td>
      <td>${esc(s.agentId)}</td><td>${esc(s.kind)}</td>
      <td class="mono">${s.parentSessionKey ? esc(s.parentSessionKey) : ''}</td>
      <td class="num">${s.stateVersion}</td>
      <td>${s.lastEventAt ? `${esc(s.lastEventKind ?? '')} <span class="muted" title="${fmtTime(s.lastEventAt)}">${ago(s.lastEventAt, d.now)}</span>` : ''}</td>
      <td class="num">${s.pendingAsWatcher || ''}</td><td class="num">${s.pendingAsTarget || ''}</td>
      <td>${s.upstream ? `${esc(s.upstream.catalogId)}:${esc(s.upstream.threadId).slice(0, 12)}${s.upstream.lastScannedAt ? ` <span class="muted">checked ${ago(s.upstream.lastScannedAt, d.now)}</span>` : ''}` : ''}</td>
    </tr>`).join('');
  const kinds = ['', 'main', 'subagent', 'adopted', 'group', 'cron', 'other'];
  view().innerHTML = `
    <h2>Sessions <span class="muted">(${d.total})</span></h2>
    <form class="filters" id="filters" role="search" aria-label="Filter sessions">
      <label for="f-agent">Agent<input id="f-agent" name="agent" value="${esc(agent)}" placeholder="any"></label>
      <label for="f-kind">Kind<select id="f-kind" name="kind">${kinds.map((k) => `<option value="${k}"${k === kind ? ' selected' : ''}>${k || 'any'}</option>`).join('')}</select></label>
      <label for="f-q">Key or label contains<input id="f-q" name="q" value="${esc(q)}" type="search"></label>
      <button type="submit">Filter</button>
    </form>
    <table id="sessions-table" aria-label="Sessions">
      <thead><tr>${head}</tr></thead>
      <tbody>${rows || `<tr><td colspan="${COLS.length}" class="muted">No session matches.</td></tr>`}</tbody>
    </table>
    <div class="pager">
      <button type="button" id="prev" ${offset <= 0 ? 'disabled' : ''}>Previous</button>
      <span>${d.total ? `${offset + 1}–${Math.min(offset + limit, d.total)} of ${d.total}` : ''}</span>
      <button type="button" id="next" ${offset + limit >= d.total ? 'disabled' : ''}>Next</button>
    </div>`;
  const nav = (changes) => {
    const p = new URLSearchParams({ agent, kind, q, sort, offset: String(offset) });
    for (const [k, v] of Object.entries(changes)) p.set(k, v);
    for (const k of [...p.keys()]) if (!p.get(k) || (k === 'offset' && p.get(k) === '0')) p.delete(k);
    go(`#/sessions?${p}`);
  };
  $('#filters').addEventListener('submit', (ev) => {
    ev.preventDefault();
    nav({ agent: $('#f-agent').value.trim(), kind: $('#f-kind').value, q: $('#f-q').value, offset: '0' });
  });
  view().querySelectorAll('th button').forEach((b) => b.addEventListener('click', () => nav({ sort: b.dataset.sort, offset: '0' })));
  $('#prev').addEventListener('click', () => nav({ offset: String(Math.max(0, offset - limit)) }));
  $('#next').addEventListener('click', () => nav({ offset: String(offset + limit) }));
  if (fromLive && active && document.getElementById(active)) document.getElementById(active).focus();
}

// ---- watch graph -------------------------------------------------------------------------

let cy = null;

function cssVar(n) {
  return getComputedStyle(document.documentElement).getPropertyValue(n).trim();
}

function styleGraph() {
  if (!cy) return;
  cy.style([
    { selector: 'node', style: {
      label: 'data(label)', 'font-size': 10, color: cssVar('--fg'), 'text-valign': 'bottom',
      'text-margin-y': 4, 'text-wrap': 'ellipsis', 'text-max-width': '120px', 'background-color': cssVar('--accent'), width: 18, height: 18,
      'border-width': 2, 'border-color': cssVar('--bg'),
    } },
    { selector: 'node[?humanRecent]', style: { 'border-color': cssVar('--human'), 'border-width': 4 } },
    { selector: 'node[?focus]', style: { width: 26, height: 26 } },
    { selector: 'node:selected', style: { 'border-color': cssVar('--focus'), 'border-width': 4 } },
    { selector: 'edge', style: {
      width: 1.5, 'line-color': cssVar('--muted'), 'target-arrow-color': cssVar('--muted'),
      'target-arrow-shape': 'triangle', 'curve-style': 'bezier', 'arrow-scale': 0.8,
    } },
    { selector: 'edge[kind = "watch"]', style: { 'line-style': 'dashed' } },
    { selector: 'edge[kind = "muted"]', style: { 'line-style': 'dotted', opacity: 0.5 } },
    { selector: 'edge[?pending]', style: {
      width: 3.5, 'line-color': cssVar('--pending'), 'target-arrow-color': cssVar('--pending'),
      label: 'pending', 'font-size': 9, color: cssVar('--pending'),
    } },
  ]);
}

// A node's label: the short key with a long last part (a subagent's UUID, an adopted session's
// hash) cut to 8 characters, so neighbouring labels do not print over each other; the full key
// is in the edge table and the selection line.
function graphLabel(k) {
  const short = shortKey(k);
  const i = short.lastIndexOf(':');
  const tail = short.slice(i + 1);
  return tail.length > 12 ? `${short.slice(0, i + 1)}${tail.slice(0, 8)}…` : short;
}

function shortKey(k) {
  const p = k.split(':');
  return p.length > 2 ? p.slice(2).join(':') : k;
}

// Watchers above the sessions they watch, a row per level; each node's box includes its label
// and boxes never overlap, so two labels cannot print over each other.
const COSE = {
  name: 'breadthfirst', directed: true, animate: false, padding: 30, spacingFactor: 1.1,
  avoidOverlap: true, nodeDimensionsIncludeLabels: true,
};

async function renderGraph(params, fromLive) {
  const focus = params.get('focus') ?? '';
  const focusAgent = params.get('focusAgentId') ?? '';
  const depth = params.get('depth') ?? '2';
  const qs = new URLSearchParams({ depth });
  if (focus) qs.set('focus', focus);
  if (focusAgent) qs.set('focusAgentId', focusAgent);
  const g = await api(`/v1/console/graph?${qs}`);
  // Edges name their ends by node index (docs/api.md §7.3).
  for (const n of g.nodes) n.id = `${n.agentId}|${n.key}`;
  for (const e of g.edges) {
    const w = g.nodes[e.from]; const t = g.nodes[e.to];
    e.source = w.id; e.target = t.id; e.watcherSessionKey = w.key; e.targetSessionKey = t.key;
  }
  const edgeRows = g.edges.map((e) => `
    <tr class="${e.pending ? 'pending' : ''}" data-edge="${esc(e.watcherSessionKey)} -> ${esc(e.targetSessionKey)}" data-pending="${e.pending}">
      <td class="mono">${esc(shortKey(e.watcherSessionKey))}</td><td class="mono">${esc(shortKey(e.targetSessionKey))}</td>
      <td>${esc(e.kind)}${e.implied ? ' (by parent)' : ''}</td><td>${e.pending ? '<span class="badge pending">pending</span>' : ''}</td>
    </tr>`).join('');
  const existing = fromLive && cy && $('#cy');
  if (!existing) {
    view().innerHTML = `
      <h2>Watch graph</h2>
      <form class="filters" id="gfilters" aria-label="Focus the graph">
        <label for="g-focus">Focus on session key<input id="g-focus" name="focus" value="${esc(focus)}" class="mono" size="36"></label>
        <label for="g-depth">Depth<select id="g-depth">${[1, 2, 3, 4].map((d) => `<option${String(d) === depth ? ' selected' : ''}>${d}</option>`).join('')}</select></label>
        <button type="submit">Show</button>
        <button type="button" id="g-all">Whole graph</button>
        <button type="button" id="g-fit">Fit</button>
      </form>
      <div class="legend" aria-hidden="true"><span>── spawn</span><span>- - explicit watch</span><span>··· muted</span><span class="pend">━ pending notice</span><span class="hum">◯ human acted recently</span></div>
      <div class="graph-wrap">
        <div id="cy" tabindex="0" role="application" aria-label="Watch graph: arrow keys move between sessions, Enter opens the selected one, + and - zoom"
          aria-describedby="cy-help"></div>
        <div class="side">
          <p id="cy-help" class="muted">Arrows select a session, Enter opens it, + / − zoom, drag to pan. The table lists every edge.</p>
          <p id="cy-selected" role="status" aria-live="polite"></p>
          <table id="edges-table" aria-label="Watch edges"><thead><tr><th scope="col">Watcher</th><th scope="col">Target</th><th scope="col">Kind</th><th scope="col">Notice</th></tr></thead>
          <tbody></tbody></table>
        </div>
      </div>
      ${g.truncated ? '<p class="muted">The graph was cut at its node limit; focus on a session to see its neighbourhood.</p>' : ''}`;
    $('#gfilters').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const f = $('#g-focus').value.trim();
      go(`#/graph?${new URLSearchParams(f ? { focus: f, depth: $('#g-depth').value } : { depth: $('#g-depth').value })}`);
    });
    $('#g-all').addEventListener('click', () => go('#/graph'));
    $('#g-fit').addEventListener('click', () => cy && cy.fit(undefined, 30));
  }
  $('#edges-table tbody').innerHTML = edgeRows || '<tr><td colspan="4" class="muted">No edges.</td></tr>';
  const elements = [
    ...g.nodes.map((n) => ({ data: {
      id: n.id, key: n.key, agent: n.agentId, label: graphLabel(n.key), humanRecent: n.humanRecent,
      focus: n.key === focus,
    } })),
    ...g.edges.map((e) => ({ data: {
      id: `${e.source}->${e.target}`, source: e.source, target: e.target, kind: e.kind, pending: e.pending,
    } })),
  ];
  if (typeof window.cytoscape !== 'function') {
    $('#cy').textContent = 'The graph library did not load; the table lists the edges.';
    return;
  }
  if (existing) {
    // Keep the layout and viewport: update data in place, lay out only new nodes.
    const ids = new Set(elements.map((e) => e.data.id));
    cy.elements().filter((el) => !ids.has(el.id())).remove();
    let added = false;
    for (const el of elements) {
      const cur = cy.getElementById(el.data.id);
      if (cur.nonempty()) cur.data(el.data); else { cy.add(el); added = true; }
    }
    if (added) cy.layout({ ...COSE, fit: false }).run();
    return;
  }
  if (cy) cy.destroy();
  cy = window.cytoscape({
    container: $('#cy'), elements, wheelSensitivity: 0.3, minZoom: 0.1, maxZoom: 4,
    layout: COSE,
  });
  window.__awareCy = cy;
  styleGraph();
  cy.on('tap', 'node', (ev) => go(sessionHref(ev.target.data('agent'), ev.target.data('key'))));
  const box = $('#cy');
  let sel = -1;
  box.addEventListener('keydown', (ev) => {
    const nodes = cy.nodes().sort((a, b) => a.position('x') - b.position('x') || a.position('y') - b.position('y'));
    if (!nodes.length) return;
    if (['ArrowRight', 'ArrowDown', 'ArrowLeft', 'ArrowUp'].includes(ev.key)) {
      ev.preventDefault();
      const step = ev.key === 'ArrowRight' || ev.key === 'ArrowDown' ? 1 : -1;
      sel = (sel + step + nodes.length) % nodes.length;
      cy.nodes().unselect();
      const n = nodes[sel];
      n.select();
      cy.center(n);
      $('#cy-selected').textContent = `Selected ${n.data('key')} (${n.data('agent')})`;
    } else if (ev.key === 'Enter' && sel >= 0) {
      const n = nodes[sel];
      go(sessionHref(n.data('agent'), n.data('key')));
    } else if (ev.key === '+' || ev.key === '=') {
      cy.zoom({ level: cy.zoom() * 1.2, renderedPosition: { x: box.clientWidth / 2, y: box.clientHeight / 2 } });
    } else if (ev.key === '-') {
      cy.zoom({ level: cy.zoom() / 1.2, renderedPosition: { x: box.clientWidth / 2, y: box.clientHeight / 2 } });
    }
  });
}

// ---- session page ------------------------------------------------------------------------

// The link and how the monitor sees it: catalog, source, marker, last check, misses in a row.
function upstreamHtml(up, now) {
  const parts = [`${esc(up.catalogId)} · ${esc(up.hostId)} · <span class="mono">${esc(up.threadId)}</span>`];
  if (!up.linked) parts.push('<span class="badge">unlinked</span>');
  const src = up.source && (up.source.filePath ?? JSON.stringify(up.source));
  const rows = [];
  if (src) rows.push(`<dt>Source</dt><dd class="mono">${esc(src)}</dd>`);
  if (up.linked) {
    rows.push(`<dt>Last check</dt><dd>${up.lastScannedAt ? `${fmtTime(up.lastScannedAt)} (${ago(up.lastScannedAt, now)})` : '<span class="muted">not checked yet</span>'}</dd>`);
    if (up.marker) rows.push(`<dt>Marker</dt><dd><code>${esc(JSON.stringify(up.marker))}</code></dd>`);
    if (up.monitored) {
      const warn = up.misses > 0 ? ' class="warn"' : '';
      rows.push(`<dt>Misses</dt><dd id="upstream-misses"${warn}>${up.misses} in a row <span class="muted">(upstream_missing at ${up.missingThreshold})</span></dd>`);
    } else {
      rows.push('<dt>Monitor</dt><dd class="muted">off: this link is not checked</dd>');
    }
  }
  return `${parts.join(' ')}${rows.length ? `<dl class="kv sub">${rows.join('')}</dl>` : ''}`;
}

async function renderSession(agent, key, params, fromLive) {
  const before = params.get('before');
  const qs = new URLSearchParams();
  if (agent) qs.set('agentId', agent);
  if (before) qs.set('before', before);
  const d = await api(`/v1/console/sessions/${enc(key)}?${qs}`);
  const s = d.session;
  const now = d.now;
  const openTurns = new Set([...document.querySelectorAll('details.turn[open]')].map((e) => e.dataset.id));
  const t = d.timeline;
  const evRows = t.events.map((e) => `
    <tr><td class="num">${e.sequence}</td><td title="${fmtTime(e.occurredAt)}">${fmtTime(e.occurredAt)}</td>
    <td>${esc(e.kind)}</td><td>${esc(e.actorType)}${e.actorId ? ` <span class="mono">${esc(e.actorId)}</span>` : ''}</td>
    <td>${esc(e.summary)}</td></tr>`).join('');
  const cursorRows = (list, whoField, whoAgent) => list.map((c) => `
    <tr class="${c.pending ? 'pending' : ''}"><td class="mono">${esc(c[whoField])}</td>
    <td class="num">${c.lastSeen}</td><td class="num">${c.notified}</td><td class="num">${c.material}</td>
    <td>${c.muted ? 'muted' : esc(c.origin)}${c.pending ? ' <span class="badge pending">pending</span>' : ''}</td>
    <td>${c.muted ? '' : `<button type="button" class="danger" data-unwatch-w="${esc(c.watcherSessionKey)}" data-unwatch-t="${esc(c.targetSessionKey)}" data-unwatch-a="${esc(c.targetAgentId)}" data-unwatch-wa="${esc(c[whoAgent] ?? '')}">Unwatch…</button>`}</td></tr>`).join('');
  const cursorTable = (label, list, whoField, whoLabel, whoAgent) => `
    <table aria-label="${label}"><thead><tr><th scope="col">${whoLabel}</th><th scope="col" class="num">last_seen</th><th scope="col" class="num">notified</th><th scope="col" class="num">material</th><th scope="col">State</th><th scope="col"><span class="sr-only">Action</span></th></tr></thead>
    <tbody>${cursorRows(list, whoField, whoAgent) || '<tr><td colspan="6" class="muted">None.</td></tr>'}</tbody></table>`;
  const up = s.upstream;
  view().innerHTML = `
    <h2><span class="mono">${esc(s.key)}</span> <span class="muted">${esc(s.agentId)} · ${esc(s.kind)} · ${esc(s.status)}</span></h2>
    <p><a href="#/graph?${new URLSearchParams({ focus: s.key, focusAgentId: s.agentId })}">Show in the watch graph</a></p>
    <div class="grid2">
      <section aria-labelledby="h-about"><h3 id="h-about">About</h3><dl class="kv">
        <dt>State version</dt><dd>${s.stateVersion}</dd>
        ${s.label ? `<dt>Label</dt><dd>${esc(s.label)}</dd>` : ''}
        ${s.parentSessionKey ? `<dt>Parent</dt><dd><a class="mono" href="${sessionHref(s.agentId, s.parentSessionKey)}">${esc(s.parentSessionKey)}</a></dd>` : ''}
        <dt>Created</dt><dd>${fmtTime(s.createdAt)} (${esc(s.createdVia)})</dd>
        <dt>Goal</dt><dd>${s.goal ? `${esc(s.goal.text)} <span class="muted">(${esc(s.goal.status)})</span>` : '<span class="muted">none</span>'}</dd>
        <dt>Upstream</dt><dd id="upstream">${up ? upstreamHtml(up, now) : '<span class="muted">none</span>'}</dd>
      </dl></section>
      <section aria-labelledby="h-notices"><h3 id="h-notices">Pending notices it holds (${d.notices.length})</h3>
        ${d.notices.map((n) => `<div class="notice"><div>${esc(n.text)}</div><div class="muted">opened ${fmtTime(n.openedAt)}</div></div>`).join('') || '<p class="muted">None.</p>'}
        ${d.systemEvents.length ? `<h3>Queued system events (${d.systemEvents.length})</h3>${d.systemEvents.map((e) => `<div class="notice">${esc(e.text)}</div>`).join('')}` : ''}
        <button type="button" id="drain" class="primary" ${d.notices.length || d.systemEvents.length ? '' : 'disabled'}>Drain…</button>
        <h3>Pending notices on it (${d.noticesOnIt.length})</h3>
        ${d.noticesOnIt.map((n) => `<div class="notice"><div class="muted">held by <span class="mono">${esc(n.watcherSessionKey)}</span></div><div>${esc(n.text)}</div></div>`).join('') || '<p class="muted">None.</p>'}
      </section>
    </div>
    <section aria-labelledby="h-timeline"><h3 id="h-timeline">Timeline</h3>
      ${t.historyGap ? `<p class="flash" role="note">History gap: events up to sequence ${t.prunedThrough} were pruned from the log.</p>` : ''}
      <table id="timeline" aria-label="Timeline"><thead><tr><th scope="col" class="num">Seq</th><th scope="col">Time</th><th scope="col">Kind</th><th scope="col">Actor</th><th scope="col">Summary</th></tr></thead>
      <tbody>${evRows || '<tr><td colspan="5" class="muted">No events.</td></tr>'}</tbody></table>
      <div class="pager">${before ? `<a href="${sessionHref(s.agentId, s.key)}">Newest</a>` : ''}${t.hasMore ? `<a href="${sessionHref(s.agentId, s.key)}?before=${t.nextBefore}">Older events</a>` : ''}</div>
    </section>
    <section aria-labelledby="h-cursors"><h3 id="h-cursors">Cursors it holds (sessions it watches)</h3>
      ${cursorTable('Cursors it holds', d.watches, 'targetSessionKey', 'Target', 'watcherAgentId')}
      <h3>Cursors held on it (its watchers)</h3>
      ${cursorTable('Cursors held on it', d.watchers, 'watcherSessionKey', 'Watcher', 'watcherAgentId')}
    </section>
    <section aria-labelledby="h-runs"><h3 id="h-runs">Runs</h3>
      <table aria-label="Runs"><thead><tr><th scope="col">Run</th><th scope="col">Started</th><th scope="col">Ended</th><th scope="col">Outcome</th></tr></thead>
      <tbody>${d.runs.map((r) => `<tr><td class="mono">${esc(r.runId)}</td><td>${fmtTime(r.startedAt)}</td><td>${fmtTime(r.endedAt)}</td><td>${esc(r.outcome ?? 'active')}</td></tr>`).join('') || '<tr><td colspan="4" class="muted">None.</td></tr>'}</tbody></table>
    </section>
    <section aria-labelledby="h-turns"><h3 id="h-turns">Turns (${d.turnCount}${d.turns.length < d.turnCount ? `, newest ${d.turns.length}` : ''})</h3>
      ${d.turnText ? '' : '<p class="muted">Turn text is shown to operators only.</p>'}
      ${d.turns.map((tn) => `<details class="turn" data-id="${esc(tn.id)}"${openTurns.has(tn.id) ? ' open' : ''}><summary>#${tn.index} ${esc(tn.role)} · ${fmtTime(tn.at)} · ${esc(tn.actorType)}${tn.actorId ? ' ' + esc(tn.actorId) : ''}</summary>${tn.text !== undefined ? `<pre style="white-space:pre-wrap">${esc(tn.text)}</pre>` : '<p class="muted">(text hidden)</p>'}</details>`).join('') || '<p class="muted">None.</p>'}
    </section>`;
  $('#drain').addEventListener('click', async () => {
    const peek = await withAuth(() => api(`/v1/sessions/${enc(s.key)}/pending?${new URLSearchParams({ agentId: s.agentId })}`));
    const items = [...peek.systemEvents.map((e) => e.text), ...peek.notices.map((n) => n.text)];
    const ok = await confirmAction('Drain this session?',
      `<p>Draining acknowledges these ${items.length} item(s) for <span class="mono">${esc(s.key)}</span>, as the agent would:</p>` +
      `<ul>${items.map((i) => `<li>${esc(i)}</li>`).join('')}</ul>`, 'Drain');
    if (!ok) return;
    try {
      await withAuth(() => api(`/v1/sessions/${enc(s.key)}/drain?${new URLSearchParams({ agentId: s.agentId })}`, { method: 'POST', body: {} }));
      render();
    } catch (e) { flash(`Drain failed: ${e.message}`); }
  });
  view().querySelectorAll('button[data-unwatch-w]').forEach((b) => b.addEventListener('click', async () => {
    const w = b.dataset.unwatchW; const tk = b.dataset.unwatchT; const ta = b.dataset.unwatchA;
    const wa = b.dataset.unwatchWa || agent;
    const ok = await confirmAction('Unwatch this pair?',
      `<p><span class="mono">${esc(w)}</span> stops watching <span class="mono">${esc(tk)}</span> (${esc(ta)}). Its pending notice, if any, is dropped.</p>`, 'Unwatch');
    if (!ok) return;
    try {
      await withAuth(() => api(`/v1/sessions/${enc(w)}/watches/${enc(tk)}?${new URLSearchParams({ agentId: wa, targetAgentId: ta })}`, { method: 'DELETE' }));
      render();
    } catch (e) { flash(`Unwatch failed: ${e.message}`); }
  }));
}

// ---- catalog (adopt) ---------------------------------------------------------------------

async function renderCatalog() {
  let d;
  try {
    d = await api('/v1/catalog?limit=50');
  } catch (e) {
    if (e.status === 401) throw e;
    view().innerHTML = `<h2>Catalog</h2><p class="muted">No catalog here: ${esc(e.message)}. Start <code>aware serve</code> with a Claude Code root to list threads.</p>`;
    return;
  }
  view().innerHTML = `<h2>Catalog: Claude Code threads</h2>
    <table aria-label="Catalog threads"><thead><tr><th scope="col">Thread</th><th scope="col">Title</th><th scope="col">Updated</th><th scope="col">Session</th></tr></thead>
    <tbody>${d.items.map((i, n) => `<tr><td class="mono">${esc(i.threadId)}</td><td>${esc(i.title ?? i.cwd ?? '')}</td><td>${fmtTime(i.updatedAt)}</td>
      <td>${i.adoptedSessionKey ? `<a class="mono" href="#/sessions?q=${enc(i.adoptedSessionKey)}">${esc(i.adoptedSessionKey)}</a>` : `<button type="button" data-adopt="${n}">Adopt…</button>`}</td></tr>`).join('') || '<tr><td colspan="4" class="muted">No threads.</td></tr>'}</tbody></table>`;
  view().querySelectorAll('button[data-adopt]').forEach((b) => b.addEventListener('click', async () => {
    const i = d.items[Number(b.dataset.adopt)];
    const ok = await confirmAction('Adopt this thread?', `<p>aware creates an adopted session for thread <span class="mono">${esc(i.threadId)}</span>, imports its turns and monitors it.</p>`, 'Adopt');
    if (!ok) return;
    try {
      await withAuth(() => api('/v1/catalog/continue', { method: 'POST', body: { catalogId: i.catalogId, hostId: i.hostId, threadId: i.threadId } }));
      render();
    } catch (e) { flash(`Adopt failed: ${e.message}`); }
  }));
}

// ---- start -------------------------------------------------------------------------------

applyTheme(localStorage.getItem('aware.theme'));
matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => applyTheme(localStorage.getItem('aware.theme')));
if (sessionStorage.getItem(TOKEN_KEY)) $('#signout').hidden = false;
if (!location.hash) history.replaceState(null, '', '#/overview');
// Wait for the deferred graph library before the first render.
window.addEventListener('DOMContentLoaded', async () => {
  await render();
  startLive();
});
