// Browser tests of the web console: Debian's chromium driven by playwright-core against a real
// `aware serve --test-clock` on a free loopback port with a temp data dir. Prints
// `N passed, M failed` and exits non-zero on a failure. Writes the README's screenshots to
// docs/images/ (1280x800, light and dark).
//
//   node console/tests/console.test.mjs          (AWARE_BIN overrides target/debug/aware)

import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const bin = process.env.AWARE_BIN ?? join(root, 'target', 'debug', 'aware');
const images = join(root, 'docs', 'images');
const T0 = 1767225600000;
const MGR = 'agent:main:main';
const W1 = 'agent:main:subagent:w1';
const W2 = 'agent:main:subagent:w2';
const CHROMIUM_ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const children = [];
const dirs = [];

async function startServer(extra = [], config = 'notify_on_create = false\n[monitor]\nenabled = false\n') {
  const dir = mkdtempSync(join(tmpdir(), 'aware-console-'));
  dirs.push(dir);
  writeFileSync(join(dir, 'config.toml'), config);
  const portFile = join(dir, 'port');
  const env = { ...process.env };
  delete env.AWARE_TOKEN; delete env.AWARE_DATA_DIR; delete env.AWARE_BIND;
  const child = spawn(bin, ['serve', '--data-dir', dir, '--bind', '127.0.0.1:0', '--port-file', portFile,
    '--test-clock', '--test-clock-start', String(T0), ...extra], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let logs = '';
  child.stderr.on('data', (b) => { logs += b; });
  children.push(child);
  const deadline = Date.now() + 20000;
  let port = null;
  while (!port) {
    if (Date.now() > deadline) throw new Error(`aware serve did not start:\n${logs}`);
    if (existsSync(portFile)) port = Number(readFileSync(portFile, 'utf8').trim()) || null;
    if (!port) await sleep(50);
  }
  const base = `http://127.0.0.1:${port}`;
  const token = extra.includes('--token') ? extra[extra.indexOf('--token') + 1] : null;
  const call = async (method, path, body, headers = {}) => {
    const h = { ...headers };
    if (token) h.Authorization = `Bearer ${token}`;
    if (body !== undefined) h['Content-Type'] = 'application/json';
    const r = await fetch(base + path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    return { status: r.status, body: text ? JSON.parse(text) : null };
  };
  while (Date.now() < deadline) {
    const r = await fetch(`${base}/health`).catch(() => null);
    if (r && r.status === 200) break;
    await sleep(50);
  }
  return { base, call };
}

const k = encodeURIComponent;
let passed = 0; let failed = 0;

async function test(name, f) {
  try {
    await f();
    passed += 1;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}\n     ${String(e && e.stack || e).split('\n').slice(0, 4).join('\n     ')}`);
  }
}

function assert(cond, msg) { if (!cond) throw new Error(msg); }

// Polls `f` in the page. (page.waitForFunction compiles its predicate with `new Function`,
// which the console's Content-Security-Policy forbids, as it should.)
async function waitIn(page, f, arg, timeout = 3000) {
  const deadline = Date.now() + timeout;
  while (!(await page.evaluate(f, arg))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${f}`);
    await sleep(25);
  }
}

// A Claude Code root with one thread, so the catalog has something to adopt.
const THREAD = '0b7c2a4e-5d6f-4a8b-9c0d-1e2f3a4b5c6d';

function claudeRoot() {
  const rootDir = mkdtempSync(join(tmpdir(), 'aware-claude-'));
  dirs.push(rootDir);
  mkdirSync(join(rootDir, 'p1'));
  const file = join(rootDir, 'p1', `${THREAD}.jsonl`);
  const row = { type: 'user', uuid: '00000000-0000-4000-8000-000000000001', timestamp: '2025-12-31T23:00:00.000Z',
    cwd: '/work/parser', message: { role: 'user', content: 'fix the tab parser' } };
  writeFileSync(file, `${JSON.stringify(row)}\n`);
  return { rootDir, file };
}

async function main() {
  const claude = claudeRoot();
  // The monitor is on (it ticks only when the test moves the clock) so adoption links the thread.
  const srv = await startServer([], 'notify_on_create = false\n[monitor]\nenabled = true\n' +
    `[claude]\nroot = ${JSON.stringify(claude.rootDir)}\n`);
  // A manager with two workers (spawned: the manager watches them by its spawn cursor).
  await srv.call('POST', '/v1/sessions', { key: MGR });
  for (const w of [W1, W2]) {
    const r = await srv.call('POST', '/v1/sessions', { key: w, parentSessionKey: MGR }, { 'X-Aware-Session': MGR });
    assert(r.status === 201, `spawn ${w}: ${r.status}`);
  }
  await srv.call('PUT', `/v1/sessions/${k(W1)}/goal`, { text: 'Ship the parser', actor: { type: 'human', id: 'alice' } });
  await srv.call('POST', `/v1/sessions/${k(W2)}/runs`, { runId: 'run-1' });
  // The goal's event opened a notice; drain so the edge starts settled.
  await srv.call('POST', `/v1/sessions/${k(MGR)}/drain`, {});

  const userDataDir = mkdtempSync(join(tmpdir(), 'aware-chromium-'));
  dirs.push(userDataDir);
  const ctx = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: CHROMIUM_ARGS, headless: true, viewport: { width: 1280, height: 800 },
  });
  const page = ctx.pages()[0] ?? await ctx.newPage();
  const consoleErrors = [];
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  const edgeRow = (w, t) => page.locator(`#edges-table tr[data-edge="${w} -> ${t}"]`);

  await test('the session table lists the spawned sessions', async () => {
    await page.goto(`${srv.base}/ui/#/sessions`);
    const table = page.locator('#sessions-table');
    await table.locator(`tr[data-key="${W1}"]`).waitFor({ timeout: 5000 });
    for (const key of [MGR, W1, W2]) {
      assert(await table.locator(`tr[data-key="${key}"]`).count() === 1, `row for ${key}`);
    }
    await page.fill('#f-q', 'w2');
    await page.press('#f-q', 'Enter');
    await waitIn(page, () => document.querySelectorAll('#sessions-table tbody tr').length === 1);
    assert(await table.locator(`tr[data-key="${W2}"]`).count() === 1, 'the text filter keeps w2');
  });

  await test('a human turn makes the manager→worker edge pending within 2 s, without reload', async () => {
    await page.goto(`${srv.base}/ui/#/graph`);
    await edgeRow(MGR, W1).waitFor({ timeout: 5000 });
    assert(await edgeRow(MGR, W1).getAttribute('data-pending') === 'false', 'starts settled');
    await page.locator('#live.on').waitFor({ timeout: 5000 });
    await page.evaluate(() => { window.__noReload = true; });
    const r = await srv.call('POST', `/v1/sessions/${k(W1)}/turns`,
      { role: 'user', text: 'please also handle tabs', provenance: { kind: 'human', humanId: 'alice' } });
    assert(r.status === 201, `turn: ${r.status}`);
    await page.locator(`#edges-table tr[data-edge="${MGR} -> ${W1}"][data-pending="true"]`).waitFor({ timeout: 2000 });
    assert(await page.evaluate(() => window.__noReload === true), 'the page was not reloaded');
    const pendingInGraph = await page.evaluate((id) => window.__awareCy.getElementById(id).data('pending'),
      `main|${MGR}->main|${W1}`);
    assert(pendingInGraph === true, 'the graph edge is marked pending');
  });

  await screenshots(page, srv, 'graph', `#/graph`);

  await test('drain (after a peek shown in the confirmation) clears the pending edge', async () => {
    await page.goto(`${srv.base}/ui/#/session/main/${k(MGR)}`);
    await page.locator('#drain:not([disabled])').waitFor({ timeout: 5000 });
    await page.click('#drain');
    const dlg = page.locator('#confirm-dialog');
    await dlg.waitFor({ state: 'visible' });
    const body = await page.locator('#confirm-body').innerText();
    assert(body.includes(`Session "${W1}" changed`), `the peek shows the notice text: ${body}`);
    await page.click('#confirm-ok');
    await waitIn(page, () => document.querySelector('#drain')?.disabled === true);
    await page.goto(`${srv.base}/ui/#/graph`);
    await page.locator(`#edges-table tr[data-edge="${MGR} -> ${W1}"][data-pending="false"]`).waitFor({ timeout: 3000 });
  });

  await test('the timeline shows the event with its summary and actor', async () => {
    await page.goto(`${srv.base}/ui/#/session/main/${k(W1)}`);
    const row = page.locator('#timeline tbody tr', { hasText: 'human_direct_message' }).first();
    await row.waitFor({ timeout: 5000 });
    const text = await row.innerText();
    assert(/human\s+alice/.test(text), `actor shown: ${text}`);
    assert(text.includes('human message'), `summary shown: ${text}`);
    const turns = await page.locator('details.turn').count();
    assert(turns === 1, `one turn, collapsed (${turns})`);
    assert(await page.locator('details.turn[open]').count() === 0, 'turns start collapsed');
  });

  await test('#/session/<key>, as a user types it, opens the session page', async () => {
    await page.goto(`${srv.base}/ui/#/session/${k(W1)}`);
    await page.locator('#timeline tbody tr', { hasText: 'human_direct_message' }).first().waitFor({ timeout: 5000 });
    const head = await page.locator('h2').first().innerText();
    assert(head.includes(W1), `the page of ${W1}: ${head}`);
  });

  await test('unwatch (after a confirmation) mutes the pair', async () => {
    await page.goto(`${srv.base}/ui/#/session/main/${k(MGR)}`);
    const btn = page.locator(`button[data-unwatch-t="${W2}"]`);
    await btn.waitFor({ timeout: 5000 });
    await btn.click();
    await page.locator('#confirm-dialog').waitFor({ state: 'visible' });
    const body = await page.locator('#confirm-body').innerText();
    assert(body.includes(W2) && body.includes(MGR), `the confirmation names the pair: ${body}`);
    await page.click('#confirm-ok');
    await btn.waitFor({ state: 'detached', timeout: 3000 });
    const r = await srv.call('GET', `/v1/sessions/${k(MGR)}/watches`);
    const c = r.body.watches.find((w) => w.targetSessionKey === W2);
    assert(c && c.muted === true, `the API shows the pair muted: ${JSON.stringify(r.body)}`);
    const w1 = r.body.watches.find((w) => w.targetSessionKey === W1);
    assert(w1 && w1.muted === false, 'the other pair is untouched');
    await page.goto(`${srv.base}/ui/#/graph`);
    await page.locator(`#edges-table tr[data-edge="${MGR} -> ${W2}"]`, { hasText: 'muted' }).waitFor({ timeout: 3000 });
  });

  await test('the landing page shows who watches whom, pending first, and says why fresh charts are empty', async () => {
    const r = await srv.call('POST', `/v1/sessions/${k(W1)}/turns`,
      { role: 'user', text: 'one more thing', provenance: { kind: 'human', humanId: 'alice' } });
    assert(r.status === 201, `turn: ${r.status}`);
    await page.goto(`${srv.base}/ui/`);
    const first = page.locator('#overview-watches tbody tr').first();
    await first.waitFor({ timeout: 3000 });
    assert(await first.getAttribute('data-pending') === 'true', `a pending edge first: ${await first.innerText()}`);
    const rows = await page.locator('#overview-watches tbody tr').count();
    assert(rows >= 2, `both spawn edges listed (${rows})`);
    const quiet = await page.locator('svg text.quiet').count();
    assert(quiet >= 1, 'an empty per-minute chart says it counts from when the page opened');
  });

  await test('at 1400 px the edge table fits its column (the Notice column is visible)', async () => {
    await page.setViewportSize({ width: 1400, height: 900 });
    await page.goto(`${srv.base}/ui/#/graph`);
    await page.locator('#edges-table tbody tr').first().waitFor({ timeout: 3000 });
    const fits = await page.evaluate(() => {
      const side = document.querySelector('.side');
      return side.scrollWidth <= side.clientWidth;
    });
    assert(fits, 'no horizontal scrolling in the edge table');
    await page.setViewportSize({ width: 1280, height: 800 });
  });

  await screenshots(page, srv, 'session', `#/session/main/${k(W1)}`);
  // Some activity while the overview is open, so its per-minute charts have something to show.
  await screenshots(page, srv, 'overview', '#/overview', async () => {
    for (const w of [W1, W2, W1]) {
      await srv.call('POST', `/v1/sessions/${k(w)}/turns`, { role: 'user', text: 'status?', provenance: { kind: 'human', humanId: 'bob' } });
      await sleep(300);
    }
    await srv.call('POST', `/v1/sessions/${k(MGR)}/drain`, {});
    await sleep(400);
  });

  await test('the overview charts events per minute by kind from the live counters', async () => {
    // Still the overview of the last screenshot, which saw human turns arrive while open.
    await page.locator('svg[aria-label^="Events per minute by kind"][aria-label*="human_direct_message per minute"]').waitFor({ timeout: 3000 });
  });

  await test('keyboard navigation reaches the table and the graph', async () => {
    await page.emulateMedia({ colorScheme: 'light' });
    await page.goto(`${srv.base}/ui/#/sessions`);
    await page.locator(`#sessions-table tr[data-key="${W1}"]`).waitFor();
    let reached = false;
    for (let i = 0; i < 40 && !reached; i++) {
      await page.keyboard.press('Tab');
      reached = await page.evaluate(() => !!document.activeElement?.closest('#sessions-table'));
    }
    assert(reached, 'Tab reaches the session table');
    await page.goto(`${srv.base}/ui/#/graph`);
    await edgeRow(MGR, W1).waitFor();
    await page.evaluate(() => document.activeElement?.blur());
    reached = false;
    for (let i = 0; i < 40 && !reached; i++) {
      await page.keyboard.press('Tab');
      reached = await page.evaluate(() => document.activeElement?.id === 'cy');
    }
    assert(reached, 'Tab reaches the graph');
    await page.keyboard.press('ArrowRight');
    const sel = await page.locator('#cy-selected').innerText();
    assert(sel.startsWith('Selected agent:main:'), `arrow keys select a session: ${sel}`);
    await page.keyboard.press('Enter');
    await waitIn(page, () => location.hash.startsWith('#/session/'));
  });

  await test('with a token set the console asks for it and refuses a wrong one', async () => {
    const tsrv = await startServer(['--token', 's3cret-token-0123456789']);
    const p2 = await ctx.newPage();
    await p2.goto(`${tsrv.base}/ui/`);
    await p2.locator('#token-dialog').waitFor({ state: 'visible', timeout: 5000 });
    await p2.fill('#token-input', 'wrong');
    await p2.press('#token-input', 'Enter');
    await p2.locator('#token-error:not([hidden])').waitFor({ timeout: 3000 });
    const msg = await p2.locator('#token-error').innerText();
    assert(/refused/i.test(msg) && msg.includes('401'), `clear refusal: ${msg}`);
    assert(await p2.evaluate(() => sessionStorage.getItem('aware.token')) === null, 'a wrong token is not kept');
    await p2.fill('#token-input', 's3cret-token-0123456789');
    await p2.press('#token-input', 'Enter');
    await p2.locator('#token-dialog').waitFor({ state: 'hidden', timeout: 3000 });
    await p2.locator('.card').first().waitFor({ timeout: 3000 });
    assert(await p2.evaluate(() => document.cookie) === '', 'no cookies');
    await p2.close();
  });

  await test('adopt (after a confirmation) creates a linked session; its page shows the misses', async () => {
    await page.goto(`${srv.base}/ui/#/catalog`);
    const btn = page.locator('button[data-adopt]');
    await btn.waitFor({ timeout: 5000 });
    await btn.click();
    await page.locator('#confirm-dialog').waitFor({ state: 'visible' });
    assert((await page.locator('#confirm-body').innerText()).includes(THREAD), 'the confirmation names the thread');
    await page.click('#confirm-ok');
    const link = page.locator('#view a.mono', { hasText: 'agent:main:claude:' });
    await link.waitFor({ timeout: 5000 });
    const cat = await srv.call('GET', '/v1/catalog');
    const key = cat.body.items[0].adoptedSessionKey;
    assert(key && key === (await link.innerText()), `the API lists the thread adopted: ${JSON.stringify(cat.body)}`);
    const s = await srv.call('GET', `/v1/sessions/${k(key)}`);
    assert(s.status === 200 && s.body.upstream.linked === true, `linked: ${JSON.stringify(s.body)}`);
    // Watched and gone: the monitor's first tick (T0 + 15 s) counts one miss.
    await srv.call('POST', `/v1/sessions/${k(MGR)}/watches`, { target: key });
    rmSync(claude.file);
    await page.goto(`${srv.base}/ui/#/session/main/${k(key)}`);
    await page.locator('#upstream-misses').waitFor({ timeout: 5000 });
    assert((await page.locator('#upstream-misses').innerText()).startsWith('0 in a row'), 'no miss yet');
    assert((await page.locator('#upstream').innerText()).includes(`${THREAD}.jsonl`), 'the source file is shown');
    const c = await srv.call('POST', '/v1/admin/clock', { now: T0 + 15000 });
    assert(c.status === 200, `clock: ${c.status}`);
    // A miss writes nothing to the store (the streak lives in the monitor), so no live hint
    // comes: the next read shows it.
    await page.reload();
    await page.locator('#upstream-misses', { hasText: '1 in a row' }).waitFor({ timeout: 3000 });
    await page.goto(`${srv.base}/ui/#/overview`);
    await page.locator('#monitor-health svg[aria-label*="ticks: 1,"]').waitFor({ timeout: 3000 });
    const next = await page.locator('#monitor-health p').innerText();
    assert(next.includes('2026-01-01 00:01:15Z'), `the next tick is shown: ${next}`);
  });

  await test('in the watch graph, subagent labels do not print over each other or over main', async () => {
    for (const id of ['3f0c2a9e-5b1d-4c7e-9a60-1d2e3f4a5b6c', '3f0c2a9e-7e8f-4a01-b2c3-d4e5f6a7b8c9']) {
      const r = await srv.call('POST', '/v1/sessions', { key: `agent:main:subagent:${id}`, parentSessionKey: MGR }, { 'X-Aware-Session': MGR });
      assert(r.status === 201, `spawn ${id}: ${r.status}`);
    }
    await page.goto(`${srv.base}/ui/#/graph?focus=${k(MGR)}`);
    await page.locator('#edges-table tbody tr').nth(3).waitFor({ timeout: 3000 });
    await page.screenshot({ path: '/tmp/ux-graph.png' });
    const overlaps = await page.evaluate(() => {
      const boxes = window.__awareCy.nodes().map((n) => ({ key: n.data('key'), b: n.boundingBox({ includeLabels: true }) }));
      const hit = [];
      for (let i = 0; i < boxes.length; i++) {
        for (let j = i + 1; j < boxes.length; j++) {
          const a = boxes[i].b; const c = boxes[j].b;
          if (a.x1 < c.x2 && c.x1 < a.x2 && a.y1 < c.y2 && c.y1 < a.y2) hit.push(`${boxes[i].key} / ${boxes[j].key}`);
        }
      }
      return hit;
    });
    const dbg = await page.evaluate(() => JSON.stringify(window.__awareCy.nodes().map((n) => [n.data('key').slice(-12), Math.round(n.position('x')), Math.round(n.position('y')), n.boundingBox({ includeLabels: true })])));
    assert(overlaps.length === 0, `labels overlap: ${overlaps.join(', ')} ${dbg}`);
  });

  await test('no script errors', async () => {
    assert(consoleErrors.length === 0, consoleErrors.join('\n'));
  });

  await ctx.close();
}

async function screenshots(page, srv, name, hash, activity) {
  await test(`screenshots of the ${name} page (light and dark)`, async () => {
    mkdirSync(images, { recursive: true });
    for (const scheme of ['light', 'dark']) {
      await page.emulateMedia({ colorScheme: scheme });
      await page.goto(`${srv.base}/ui/${hash}`);
      await page.reload();
      await page.locator('#view h2').first().waitFor();
      await page.locator('#live.on').waitFor({ timeout: 5000 }).catch(() => {});
      if (activity) await activity();
      await page.waitForLoadState('networkidle').catch(() => {});
      await sleep(300);
      await page.screenshot({ path: join(images, `console-${name}-${scheme}.png`) });
    }
    await page.emulateMedia({ colorScheme: 'light' });
  });
}

try {
  await main();
} catch (e) {
  failed += 1;
  console.log(`FAIL setup\n     ${e && e.stack || e}`);
} finally {
  for (const c of children) c.kill('SIGTERM');
  await sleep(200);
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
