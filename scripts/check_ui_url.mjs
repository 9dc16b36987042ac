// The browser half of scripts/check_ui_url.py: a person's headless Chromium (playwright-core)
// opening the approval links an MCP client was given. It reports what the person sees;
// check_ui_url.py asserts on it. check_ui_url.py passes, in the environment:
//
//   IDEM_UI_URL      the inbox, e.g. http://127.0.0.1:40123
//   IDEM_UI_TOKEN    its access token
//   IDEM_UI_OUT      where the screenshots go (target/ui-url-check)
//   IDEM_UI_MODULES  the node_modules holding playwright-core
//   IDEM_UI_CHROMIUM the browser, /usr/bin/chromium
//
// and then writes one JSON request per line on stdin; each is answered with one JSON line on
// stdout:
//
//   {"op": "decide", "url": U, "decision": "approve"|"deny", "reason": R, "shot": NAME}
//     In a new browser (no cookie): open U, sign in on the form it shows, read the call
//     shown, click Approve (or fill the reason and click Deny); answers what each page showed.
//   {"op": "open", "url": U}
//     In a browser signed in to the inbox: open U; answers the status, the error shown and
//     whether any decision form is on the page.
//
// A step that cannot be done (no such button, a timeout) is answered {"stopped": "..."}.

import { createRequire } from 'node:module';
import path from 'node:path';
import readline from 'node:readline';

const env = (name) => {
  const value = process.env[name];
  if (!value) {
    console.log(JSON.stringify({ stopped: `${name} is not set: run scripts/check_ui_url.py` }));
    process.exit(2);
  }
  return value;
};

const BASE = env('IDEM_UI_URL');
const TOKEN = env('IDEM_UI_TOKEN');
const OUT = env('IDEM_UI_OUT');
const require = createRequire(path.join(env('IDEM_UI_MODULES'), 'package.json'));
const { chromium } = require('playwright-core');

async function text(locator) {
  if (await locator.count() === 0) {
    return null;
  }
  return ((await locator.first().textContent()) ?? '').trim();
}

/** Run `action` (a click) and wait for the page it navigates to; its response. */
async function navigates(page, action) {
  const [response] = await Promise.all([page.waitForNavigation(), action()]);
  return response;
}

/** How many decision forms (Approve, Deny, or any form carrying `shown`) the page has. */
async function decisionForms(page) {
  return page.locator('form[action="/approve"], form[action="/deny"], input[name=shown]').count();
}

async function newPage(browser) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  context.setDefaultTimeout(15_000);
  return [context, await context.newPage()];
}

/** A person who was sent `url`: signs in on the form it shows, decides the call shown. */
async function decide(browser, { url, decision, reason, shot }) {
  const [context, page] = await newPage(browser);
  try {
    const seen = {};
    const first = await page.goto(url);
    seen.first = {
      status: first.status(),
      tokenField: await page.locator('input[name=token]').count(),
      next: await page.locator('input[name=next]').getAttribute('value').catch(() => null),
      forms: await decisionForms(page),
    };
    if (seen.first.tokenField !== 1) {
      return seen; // no sign-in form to sign in on
    }
    await page.fill('input[name=token]', TOKEN);
    const signedIn = await navigates(page, () => page.click('button[type=submit]'));
    const rows = page.locator('#pending tr[data-key]');
    const calls = [];
    for (let i = 0; i < await rows.count(); i++) {
      const cells = rows.nth(i).locator('td');
      calls.push({
        tool: await text(cells.nth(0).locator('b')),
        tenant: await text(cells.nth(1)),
        arguments: await text(cells.nth(4)),
      });
    }
    const here = new URL(page.url());
    seen.signedIn = {
      status: signedIn.status(),
      at: here.pathname + here.search,
      calls,
      approve: await page.locator('#pending button.approve').count(),
      deny: await page.locator('#pending button.deny').count(),
    };
    if (shot) {
      await page.screenshot({ path: path.join(OUT, shot), fullPage: true });
    }
    if (calls.length !== 1 || seen.signedIn.approve !== 1 || seen.signedIn.deny !== 1) {
      return seen; // not one call to decide
    }
    const row = rows.first();
    let decided;
    if (decision === 'approve') {
      decided = await navigates(page, () => row.locator('button.approve').click());
    } else {
      await row.locator('input[name=reason]').fill(reason);
      decided = await navigates(page, () => row.locator('button.deny').click());
    }
    seen.decided = { status: decided.status(), notice: await text(page.locator('#notice')) };
    return seen;
  } finally {
    await context.close();
  }
}

/** A signed-in person opening `url`. */
async function open(signedIn, { url }) {
  const response = await signedIn.goto(url);
  return {
    status: response.status(),
    error: await text(signedIn.locator('#error')),
    tokenField: await signedIn.locator('input[name=token]').count(),
    forms: await decisionForms(signedIn),
    calls: await signedIn.locator('#pending tr[data-key]').count(),
  };
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
  let signedIn = null;
  try {
    const lines = readline.createInterface({ input: process.stdin });
    for await (const line of lines) {
      if (!line.trim()) {
        continue;
      }
      let answer;
      try {
        const request = JSON.parse(line);
        if (request.op === 'decide') {
          answer = await decide(browser, request);
        } else if (request.op === 'open') {
          if (!signedIn) {
            [, signedIn] = await newPage(browser);
            await signedIn.goto(BASE + '/login');
            await signedIn.fill('input[name=token]', TOKEN);
            await navigates(signedIn, () => signedIn.click('button[type=submit]'));
          }
          answer = await open(signedIn, request);
        } else {
          answer = { stopped: `unknown op ${JSON.stringify(request.op)}` };
        }
      } catch (e) {
        answer = { stopped: String(e.stack ?? e).slice(0, 2000) };
      }
      console.log(JSON.stringify(answer));
    }
  } finally {
    await browser.close();
  }
}

main().catch((e) => {
  console.log(JSON.stringify({ stopped: String(e.stack ?? e).slice(0, 2000) }));
  process.exit(1);
});
