// The browser half of scripts/check_ui.py: drives `idem ui` in headless Chromium with
// playwright-core, as an operator would, and checks the store after each decision with the
// `idem` command line. check_ui.py prepares the store, starts the inbox and passes, in the
// environment:
//
//   IDEM_UI_URL      the inbox, e.g. http://127.0.0.1:40123
//   IDEM_UI_TOKEN    its access token
//   IDEM_UI_STORE    the store, sqlite:PATH
//   IDEM_UI_DB       the SQLite file, for the agent example
//   IDEM_UI_BIN      target/debug/idem
//   IDEM_UI_AGENT    target/debug/examples/agent
//   IDEM_UI_OUT      where the screenshots go (target/ui-check)
//   IDEM_UI_MODULES  the node_modules holding playwright-core
//   IDEM_UI_CHROMIUM the browser, /usr/bin/chromium
//
// Prints `ok   what` per check; on the first failure prints `FAIL what` and exits 1.

import { execFileSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const env = (name) => {
  const value = process.env[name];
  if (!value) {
    console.log(`FAIL ${name} is not set: run scripts/check_ui.py, which sets it`);
    process.exit(2);
  }
  return value;
};

const BASE = env('IDEM_UI_URL');
const TOKEN = env('IDEM_UI_TOKEN');
const STORE = env('IDEM_UI_STORE');
const DB = env('IDEM_UI_DB');
const IDEM = env('IDEM_UI_BIN');
const AGENT = env('IDEM_UI_AGENT');
const OUT = env('IDEM_UI_OUT');
const require = createRequire(path.join(env('IDEM_UI_MODULES'), 'package.json'));
const { chromium } = require('playwright-core');

const WHO = 'dana@support-desk';
const REASON = 'customer asked to keep the account';

class Failed extends Error {}

function expect(ok, what) {
  if (!ok) {
    throw new Failed(what);
  }
  console.log(`ok   ${what}`);
}

/** `idem <args> --json --store STORE`, parsed. */
function idem(...args) {
  const out = execFileSync(IDEM, [...args, '--json', '--store', STORE], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 30_000,
  });
  return JSON.parse(out);
}

/** The agent example's retry, `--leave-to-operator` on the same store; its stdout. */
function agentRetry() {
  return execFileSync(AGENT, ['--db', DB, '--leave-to-operator'], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 60_000,
  });
}

/** Run `action` (a click, a submit) and wait for the page it navigates to; its response. */
async function navigates(page, action) {
  const [response] = await Promise.all([page.waitForNavigation(), action()]);
  return response;
}

/** A screenshot of the whole page, as `OUT/name`. */
async function screenshot(page, name) {
  const file = path.join(OUT, name);
  const png = await page.screenshot({ path: file, fullPage: true });
  expect(png.length > 10_000 && statSync(file).size === png.length, `a screenshot: ${file}`);
}

async function text(locator) {
  return ((await locator.textContent()) ?? '').trim();
}

/** A form POST to the inbox without a browser: `fields` url-encoded, `headers` as given. */
async function post(route, fields, headers = {}) {
  const response = await fetch(BASE + route, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams(fields),
  });
  return { status: response.status, body: await response.text() };
}

async function checkRefused(page) {
  const bare = await fetch(BASE + '/');
  const body = await bare.text();
  expect(bare.status === 401 && body.includes('name=token'),
    `GET / without the session cookie is refused with 401 and the login form (${bare.status})`);

  const first = await page.goto(BASE + '/');
  expect(first.status() === 401 && await page.locator('input[name=token]').isVisible(),
    'and the browser, sent to the inbox, sees the login form');

  await page.fill('input[name=token]', 'f'.repeat(32));
  const wrong = await navigates(page, () => page.click('button[type=submit]'));
  const error = await text(page.locator('#error'));
  expect(wrong.status() === 401 && error === "That is not the inbox's token.",
    `a wrong token on the login form is refused with 401: "${error}"`);
  const cookies = await page.context().cookies();
  expect(!cookies.some((c) => c.name === 'idem_session'), 'and no session cookie is set');

  const approve = await post('/approve', { csrf: 'x', key: 'x', shown: 'x' });
  expect(approve.status === 401, `a POST /approve without the session is refused with 401 (${approve.status})`);
}

async function checkLogin(page) {
  await page.fill('input[name=token]', TOKEN);
  const inbox = await navigates(page, () => page.click('button[type=submit]'));
  expect(inbox.status() === 200 && new URL(page.url()).pathname === '/',
    `the right token on the login form opens the inbox (${inbox.status()} at ${page.url()})`);
  const session = (await page.context().cookies()).find((c) => c.name === 'idem_session');
  expect(session && session.httpOnly && session.sameSite === 'Strict',
    'the session cookie is HttpOnly and SameSite=Strict');

  const rows = page.locator('#pending tr[data-key]');
  const count = await rows.count();
  const seen = [];
  for (let i = 0; i < count; i++) {
    const cells = rows.nth(i).locator('td');
    seen.push([await text(cells.nth(0).locator('b')), await text(cells.nth(1)),
      await text(cells.nth(4))]);
  }
  expect(count === 2 && seen.every(([tool, tenant]) => tool === 'delete_account' && tenant === 'acme-corp'),
    `"Waiting for approval" lists two delete_account calls for acme-corp: ${JSON.stringify(seen.map((s) => s.slice(0, 2)))}`);
  const args = seen.map((s) => s[2]).join(' ');
  expect(args.includes('"customer_id": "cus_99"') && args.includes('"customer_id": "cus_77"'),
    'their arguments show cus_99 and cus_77');
  const stat = await text(page.locator('#stat-pending b'));
  expect(stat === '2', `the header counts 2 pending approvals (${stat}), globex's expired ones not among them`);
  const approvals = await page.locator('#pending button.approve').count();
  expect(approvals === 2, 'each row has an Approve button (the inbox holds the signing key)');
  await screenshot(page, 'inbox.png');
}

function pendingRow(page, customer) {
  return page.locator('#pending tr[data-key]', { hasText: `"${customer}"` });
}

async function checkDecisions(page) {
  const approveRow = pendingRow(page, 'cus_99');
  const denyRow = pendingRow(page, 'cus_77');
  expect(await approveRow.count() === 1 && await denyRow.count() === 1, 'one row for each customer');
  const approved = await approveRow.getAttribute('data-key');
  const denied = await denyRow.getAttribute('data-key');

  const afterApprove = await navigates(page, () => approveRow.locator('button.approve').click());
  const notice = await text(page.locator('#notice'));
  expect(afterApprove.status() === 200 && notice.startsWith(`Approved delete_account for acme-corp by ${WHO}`),
    `Approve on the cus_99 row: "${notice}"`);
  expect(await pendingRow(page, 'cus_99').count() === 0 && await pendingRow(page, 'cus_77').count() === 1,
    'and the row leaves the pending table');
  const shownApproved = idem('approvals', 'show', approved);
  expect(shownApproved.status === 'approved' && shownApproved.decision?.by === WHO
      && shownApproved.decision?.edited_arguments === null,
    `\`idem approvals show\`: approved by ${WHO}, arguments as shown`);

  await denyRow.locator('input[name=reason]').fill(REASON);
  await navigates(page, () => denyRow.locator('button.deny').click());
  const deniedNotice = await text(page.locator('#notice'));
  expect(deniedNotice === `Denied delete_account for acme-corp by ${WHO}: ${REASON}`,
    `Deny on the cus_77 row with a reason: "${deniedNotice}"`);
  expect(await page.locator('#no-pending').isVisible() && await text(page.locator('#stat-pending b')) === '0',
    'nothing is left waiting, and the header counts 0');
  const shownDenied = idem('approvals', 'show', denied);
  expect(shownDenied.status === 'denied' && shownDenied.decision?.reason === REASON
      && shownDenied.decision?.by === WHO,
    '`idem approvals show`: denied, with the reason');
  const decidedStatus = await text(page.locator(`#decided tr[data-key="${denied}"] .status`));
  expect(decidedStatus === `denied: ${REASON}`, `"Decided and expired" shows it: "${decidedStatus}"`);
  await screenshot(page, 'inbox-decided.png');
}

function checkAgent() {
  const lines = (out) => out.split('\n').filter((l) => l.includes('irreversible, left to an operator: delete_account'));
  const retry = agentRetry();
  const [ran, refused] = lines(retry);
  expect(ran?.includes('executed (1 attempt) -> {"deleted":"cus_99"}'),
    `the agent's retry runs the approved call once: ${ran?.replace(/\s+/g, ' ')}`);
  expect(refused?.includes('refused: approval_denied') && refused.includes(REASON),
    'and is refused the denied one, with the reason (approval_denied)');
  expect(retry.includes('account deletions  1 requests -> 1 effects'),
    'the account provider got 1 request, 1 effect');
  const again = agentRetry();
  const [replayed, still] = lines(again);
  expect(replayed?.includes('deduplicated (replayed {"deleted":"cus_99"})'),
    'run again: the approved call is replayed (deduplicated)');
  expect(still?.includes('refused: approval_denied'), 'the denied one is still refused');
  expect(again.includes('account deletions  0 requests -> 0 effects'),
    'and the account provider got 0 requests, 0 effects');
}

async function checkExpired(page) {
  await page.goto(BASE + '/');
  const rows = page.locator('#decided tr[data-key]', { hasText: 'globex' });
  const count = await rows.count();
  const statuses = [];
  for (let i = 0; i < count; i++) {
    statuses.push(await text(rows.nth(i).locator('.status')));
  }
  expect(count === 2 && statuses.every((s) => s === 'expired'),
    `globex's two requests are under "Decided and expired" as expired: ${JSON.stringify(statuses)}`);
  const key = await rows.first().getAttribute('data-key');
  const before = idem('approvals', 'show', key);
  expect(before.status === 'expired' && before.decision === null, '`idem approvals show` says expired, undecided');

  const refused = await navigates(page, () => page.evaluate(([key, shown]) => {
    const form = document.createElement('form');
    form.method = 'post';
    form.action = '/approve';
    const fields = { csrf: document.querySelector('input[name=csrf]').value, key, shown };
    for (const [name, value] of Object.entries(fields)) {
      const input = document.createElement('input');
      input.type = 'hidden';
      input.name = name;
      input.value = value;
      form.append(input);
    }
    document.body.append(form);
    form.submit();
  }, [key, before.fingerprint]));
  const error = await text(page.locator('#error'));
  expect(refused.status() === 409 && error.includes(`the approval request under key ${key} expired at`),
    `approving an expired request from the page is refused with 409: "${error}"`);
  const after = idem('approvals', 'show', key);
  expect(after.status === 'expired' && after.decision === null, 'and the store still says expired, undecided');
  return key;
}

async function checkForgery(page, expired) {
  await page.goto(BASE + '/');
  const unknown = page.locator('#unknown tr[data-key]', { hasText: 'acme-corp' });
  const sms = await unknown.getAttribute('data-key');
  const csrf = await page.locator('input[name=csrf]').first().inputValue();
  const forged = 'f'.repeat(csrf.length);
  const send = (route, fields) => page.evaluate(async ([route, fields]) => {
    const response = await fetch(route, { method: 'POST', body: new URLSearchParams(fields) });
    return { status: response.status, body: await response.text() };
  }, [route, fields]);

  const shown = idem('approvals', 'show', expired).fingerprint;
  const deny = await send('/deny', { csrf: forged, key: expired, shown, reason: 'forged' });
  expect(deny.status === 403 && deny.body.includes('anti-forgery token'),
    `a POST /deny with the session cookie but a wrong csrf token is refused with 403 (${deny.status})`);
  const entry = idem('approvals', 'show', expired);
  expect(entry.status === 'expired' && entry.decision === null, 'and the request is unchanged');

  const fence = String(idem('records', 'show', sms).fence);
  const release = await send('/release', { csrf: forged, key: sms, fence });
  expect(release.status === 403, `a POST /release with a wrong csrf token is refused with 403 (${release.status})`);
  const cookie = (await page.context().cookies()).find((c) => c.name === 'idem_session');
  const crossSite = await post('/release', { csrf, key: sms, fence },
    { cookie: `idem_session=${cookie.value}`, origin: 'https://evil.example' });
  expect(crossSite.status === 403 && crossSite.body.includes('another site'),
    `and one with the right token but Origin https://evil.example too (${crossSite.status})`);
  expect(idem('records', 'show', sms).state === 'unknown', 'the send_sms record is still unknown');

  // A page older than the record: the form's fence is not the record's.
  const stale = await send('/release', { csrf, key: sms, fence: String(Number(fence) - 1) });
  expect(stale.status === 409 && stale.body.includes('changed since the page showed it'),
    `a release from a page showing an older state of the record is refused with 409 (${stale.status})`);
  expect(idem('records', 'show', sms).state === 'unknown', 'and the record is still unknown');

  // A link cannot make the inbox announce a decision nobody made.
  await page.goto(BASE + '/?done=' + encodeURIComponent('Approved delete_account for everyone'));
  expect(await page.locator('#notice').count() === 0, 'a notice in a crafted link is not shown');
  await page.goto(BASE + '/?done=' + encodeURIComponent('Approved it') + '&tag=' + 'a'.repeat(64));
  expect(await page.locator('#notice').count() === 0, 'nor one with a forged tag');
  return sms;
}

async function checkResolve(page, sms) {
  const row = page.locator(`#unknown tr[data-key="${sms}"]`);
  expect(await row.count() === 1 && (await text(row.locator('td').nth(1))) === 'acme-corp',
    '"Unknown outcomes" lists acme-corp\'s send_sms');
  await row.locator('input[name=value]').fill('{"sms": 1}');
  await navigates(page, () => row.locator('form[action="/resolve"] button').click());
  const notice = await text(page.locator('#notice'));
  expect(notice.startsWith(`Resolved send_sms for acme-corp by ${WHO}`), `Resolve with {"sms": 1}: "${notice}"`);
  expect(await page.locator(`#unknown tr[data-key="${sms}"]`).count() === 0, 'and the row leaves the table');
  const record = idem('records', 'show', sms);
  expect(record.state === 'completed' && JSON.stringify(record.outcome) === '{"success":{"sms":1}}',
    `\`idem records show\`: completed with ${JSON.stringify(record.outcome)}`);
}

/** The pending request under `key` replaced by one for `customer`, as a new request made
 * under its key since the page was drawn would leave it (the SQLite file, edited directly). */
function requestedAgainOtherwise(key, customer) {
  const script = `
import hashlib, json, sqlite3, sys
db, key, customer = sys.argv[1:4]
with sqlite3.connect(db) as conn:
    (body,) = conn.execute("SELECT body FROM idem_approvals WHERE key = ?", (key,)).fetchone()
    entry = json.loads(body)
    entry["arguments"] = {"customer_id": customer}
    canonical = json.dumps(entry["arguments"], separators=(",", ":"), sort_keys=True)
    entry["fingerprint"] = hashlib.sha256(canonical.encode()).hexdigest()
    conn.execute("UPDATE idem_approvals SET body = ? WHERE key = ?", (json.dumps(entry), key))
`;
  execFileSync('python3', ['-c', script, DB, key, customer], { stdio: 'inherit', timeout: 30_000 });
}

/** The agent example leaves two more approvals (cus_99, cus_77) for `tenant`. */
function agentLeavesTwoFor(tenant) {
  const left = execFileSync(AGENT, ['--db', DB, '--leave-to-operator', '--tenant', tenant], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 60_000,
  });
  expect(left.includes('waiting for a person: delete_account {"customer_id":"cus_99"}'),
    `the agent leaves two more approvals, for ${tenant}`);
}

async function checkBatch(page) {
  // Two more calls for initech wait for a person.
  agentLeavesTwoFor('initech');
  await page.goto(BASE + '/');
  const row = (customer) => page.locator('#pending tr[data-key]', { hasText: `"${customer}"` });
  const kept = await row('cus_99').getAttribute('data-key');
  const changed = await row('cus_77').getAttribute('data-key');
  await row('cus_99').locator('input[type=checkbox]').check();
  await row('cus_77').locator('input[type=checkbox]').check();
  // While the operator looks, cus_77's call is requested again for someone else.
  requestedAgainOtherwise(changed, 'cus_55');
  await navigates(page, () => page.click('#batch button.approve-selected'));
  const notice = await text(page.locator('#notice'));
  expect(notice.startsWith(`Approved 1 of 2 selected by ${WHO}: delete_account for initech`)
      && notice.includes(`Not approved: key ${changed}`) && notice.includes('other arguments than the ones shown'),
    `"Approve selected" on two rows, one changed since the page showed it: "${notice}"`);
  expect(idem('approvals', 'show', kept).status === 'approved', 'the unchanged call is approved');
  const still = idem('approvals', 'show', changed);
  expect(still.status === 'pending' && JSON.stringify(still.arguments) === '{"customer_id":"cus_55"}',
    'the changed one is refused alone: still pending, with its new arguments');

  // Deny what is left, as it is now shown.
  await row('cus_55').locator('input[type=checkbox]').check();
  await page.fill('#batch input[name=reason]', REASON);
  await navigates(page, () => page.click('#batch button.deny-selected'));
  const denied = await text(page.locator('#notice'));
  expect(denied === `Denied 1 of 1 selected by ${WHO}: delete_account for initech (${REASON})`,
    `"Deny selected" with a reason: "${denied}"`);
  expect(idem('approvals', 'show', changed).status === 'denied', 'and the store says denied');
}

/** The pending request under `key` marked as needing two approvers (four eyes), as a tool
 * with `approvers = 2` records it (the SQLite file, edited directly: the example's tools
 * need one). */
function needsTwoApprovers(key) {
  const script = `
import json, sqlite3, sys
db, key = sys.argv[1:3]
with sqlite3.connect(db) as conn:
    (body,) = conn.execute("SELECT body FROM idem_approvals WHERE key = ?", (key,)).fetchone()
    entry = json.loads(body)
    entry["approvers"] = 2
    conn.execute("UPDATE idem_approvals SET body = ? WHERE key = ?", (json.dumps(entry), key))
`;
  execFileSync('python3', ['-c', script, DB, key], { stdio: 'inherit', timeout: 30_000 });
}

async function checkFourEyes(page) {
  agentLeavesTwoFor('umbrella');
  await page.goto(BASE + '/');
  const row = () => page.locator('#pending tr[data-key]', { hasText: `"cus_99"` })
    .filter({ hasText: 'umbrella' });
  const key = await row().getAttribute('data-key');
  needsTwoApprovers(key);
  await page.goto(BASE + '/');
  const before = await text(row().locator('.approvers'));
  expect(before === 'no approval yet (0 of 2); awaiting 2 distinct approvers',
    `a call that needs two approvers says so in its row: "${before}"`);
  expect(await row().locator('details').count() === 0, 'and offers no edit (both approve it as called)');

  await navigates(page, () => row().locator('button.approve').click());
  const notice = await text(page.locator('#notice'));
  expect(notice === `Your approval of delete_account for umbrella is recorded: approved by ${WHO} (1 of 2); awaiting 1 more approver, not ${WHO}.`,
    `the first approval is recorded, the call still waits: "${notice}"`);
  const after = await text(row().locator('.approvers'));
  expect(after === `approved by ${WHO} (1 of 2); awaiting 1 more approver, not ${WHO}`,
    `the row shows who approved and who is awaited: "${after}"`);

  const twice = await navigates(page, () => row().locator('button.approve').click());
  const refused = await text(page.locator('#error'));
  expect(twice.status() === 409 && refused.includes(`${WHO} already approved`) && refused.includes('one person counts once'),
    `the same person approving again is refused (${twice.status()}): "${refused}"`);
  expect(idem('approvals', 'show', key).status === 'pending', 'and the call still waits');

  // The second person decides at the command line: another door, another identity.
  execFileSync(IDEM, ['approvals', 'approve', key, '--yes', '--as', 'lee@desk', '--store', STORE], {
    env: { ...process.env, IDEM_APPROVAL_KEY: env('IDEM_UI_APPROVAL_KEY') },
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 30_000,
  });
  const decided = idem('approvals', 'show', key);
  expect(decided.status === 'approved' && decided.approved_by.map((a) => a.by).join(',') === `${WHO},lee@desk`,
    `after lee@desk at the command line it is approved by both: ${JSON.stringify(decided.approved_by)}`);
  await page.goto(BASE + '/');
  expect(await row().count() === 0, 'and it leaves the pending table');
}

async function checkGrants(page) {
  // A grant made at the command line: delete_account for acme-corp, cus_99 only, an hour.
  const made = execFileSync(IDEM, ['grants', 'add', '--yes', '--as', 'lee@desk', '--tenant', 'acme-corp',
    '--tool', 'delete_account', '--for', '1h', '--within', '{"pointer": "/customer_id", "equals": "cus_99"}',
    '--json', '--store', STORE], {
    encoding: 'utf8',
    env: { ...process.env, IDEM_APPROVAL_KEY: env('IDEM_UI_APPROVAL_KEY') },
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 30_000,
  });
  const id = JSON.parse(made).id;
  await page.goto(BASE + '/');
  const row = page.locator(`#grants tr[data-grant="${id}"]`);
  const bounds = await text(row.locator('.bounds'));
  expect(await row.count() === 1 && bounds === '`/customer_id` equal to "cus_99"' || bounds.includes('cus_99'),
    `the inbox lists the standing grant with its bounds: "${bounds}"`);
  await navigates(page, () => row.locator('button.deny').click());
  const notice = await text(page.locator('#notice'));
  expect(notice.startsWith(`Revoked grant ${id} by lee@desk`) && notice.endsWith(`by ${WHO}: it lets nothing through.`),
    `Revoke on its row: "${notice}"`);
  expect(await page.locator('#no-grants').isVisible(), 'and no grant stands');
  const listed = idem('grants', 'list', '--all');
  expect(listed.some((g) => g.id === id && g.status === 'revoked' && g.revoked.by === WHO),
    '`idem grants list --all`: revoked, by the person signed in');
}

async function checkSession(page) {
  const answer = await page.goto(BASE + '/');
  const headers = answer.headers();
  expect(headers['cache-control'] === 'no-store' && headers['x-frame-options'] === 'DENY'
    && (headers['content-security-policy'] ?? '').includes("frame-ancestors 'none'"),
    'pages are never cached nor framed (Cache-Control: no-store, X-Frame-Options: DENY, CSP)');
  const script = await fetch(BASE + '/', { headers: { authorization: `Bearer ${TOKEN}` } });
  expect(script.status === 200, `a script with the token as a bearer reads the inbox (${script.status})`);
  const cookie = (await page.context().cookies()).find((c) => c.name === 'idem_session');
  await navigates(page, () => page.click('form[action="/logout"] button'));
  expect(new URL(page.url()).pathname === '/login', 'Sign out leads to the login page');
  const copied = await fetch(BASE + '/', { headers: { cookie: `idem_session=${cookie.value}` } });
  expect(copied.status === 401, `a copy of the signed-out session's cookie is refused (${copied.status})`);
}

async function main() {
  const args = ['--disable-gpu', '--disable-dev-shm-usage'];
  if (process.getuid?.() === 0) {
    args.push('--no-sandbox'); // Chromium's sandbox refuses to run as root
  }
  const browser = await chromium.launch({
    executablePath: env('IDEM_UI_CHROMIUM'),
    headless: true,
    args,
  });
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    context.setDefaultTimeout(15_000);
    const page = await context.newPage();
    await checkRefused(page);
    await checkLogin(page);
    await checkDecisions(page);
    checkAgent();
    const expired = await checkExpired(page);
    const sms = await checkForgery(page, expired);
    await checkResolve(page, sms);
    await checkBatch(page);
    // The grant first: a desk over a store takes a tool's policy from its latest request,
    // and the four-eyes step marks one of delete_account's requests as needing two
    // approvers, which a grant must not stand for (requests made in one millisecond would
    // leave which is latest to the listing's order).
    await checkGrants(page);
    await checkFourEyes(page);
    await checkSession(page);
  } finally {
    await browser.close();
  }
}

main().catch((e) => {
  console.log(`FAIL ${e instanceof Failed ? e.message : `the check stopped: ${e.stack ?? e}`}`);
  if (e.stderr) {
    console.log(String(e.stderr).slice(-2000));
  }
  process.exit(1);
});
