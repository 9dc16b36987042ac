// The official TypeScript SDK's client (`@modelcontextprotocol/sdk`, the base of most MCP
// hosts) against examples/mcp_server.rs, sending no `_meta` at all, as the hosts do.
// scripts/check_mcp_ts.py installs the SDK and passes, in the environment:
//
//   IDEM_TS_MODULES  the node_modules holding @modelcontextprotocol/sdk
//   IDEM_TS_SERVER   the example's binary (target/debug/examples/mcp_server)
//   IDEM_TS_TMP      a fresh folder for the stores and notebooks
//
// Each execution of `add_note` is a line in a notebook (IDEM_NOTES), so effects are counted
// there. Prints `ok   what` or `FAIL what` per check; exits 1 if any failed.

import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';

const env = (name) => {
  const value = process.env[name];
  if (!value) {
    console.log(`FAIL ${name} is not set: run scripts/check_mcp_ts.py, which sets it`);
    process.exit(2);
  }
  return value;
};

const MODULES = env('IDEM_TS_MODULES');
const SERVER = env('IDEM_TS_SERVER');
const TMP = env('IDEM_TS_TMP');
const require = createRequire(path.join(MODULES, 'package.json'));
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { StreamableHTTPClientTransport } = require(
  '@modelcontextprotocol/sdk/client/streamableHttp.js',
);

const DEDUPLICATED = 'io.idem/deduplicated';
const failures = [];

function expect(ok, what) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) {
    failures.push(what);
  }
}

const dedup = (result) => result?._meta?.[DEDUPLICATED];
const text = (result) => (result?.content ?? []).map((block) => block.text ?? '').join(' ');

/** How many times `add_note` ran with `note`: one notebook line per execution. */
function notesIn(notebook, note) {
  if (!existsSync(notebook)) {
    return 0;
  }
  return readFileSync(notebook, 'utf8')
    .split('\n')
    .filter((line) => line.endsWith(` ${note}`)).length;
}

function client() {
  return new Client({ name: 'check_mcp_ts', version: '0' });
}

/** A client connected to the example over stdio, started with `args`. */
async function overStdio(name, args = []) {
  const c = client();
  const transport = new StdioClientTransport({
    command: SERVER,
    args,
    env: { ...process.env, IDEM_DB: path.join(TMP, `${name}.db`), IDEM_NOTES: notebookOf(name) },
    stderr: 'ignore',
  });
  await c.connect(transport);
  return c;
}

const notebookOf = (name) => path.join(TMP, `${name}-notes.txt`);

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

async function waitForPort(port) {
  for (let i = 0; i < 400; i += 1) {
    const open = await new Promise((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => {
        socket.end();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) {
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`the example did not listen on port ${port}`);
}

/** The example over Streamable HTTP (token `token-a` acts for acme); returns its URL and
 * a function that stops it. */
async function httpServer(name, args = []) {
  const port = await freePort();
  const server = spawn(SERVER, ['--http', `127.0.0.1:${port}`, ...args], {
    env: {
      ...process.env,
      IDEM_DB: path.join(TMP, `${name}.db`),
      IDEM_NOTES: notebookOf(name),
      IDEM_MCP_TOKENS: 'token-a=acme',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  await waitForPort(port);
  const stopped = new Promise((resolve) => server.once('exit', resolve));
  return {
    url: new URL(`http://127.0.0.1:${port}/mcp`),
    stop: async () => {
      server.kill('SIGTERM');
      await stopped;
    },
  };
}

/** A client over Streamable HTTP, on a session of its own, fetching with `fetch`. The SDK
 * does not resume a broken stream (no retries): a host that cannot resume re-issues. */
async function overHttp(url, fetchWith = fetch) {
  const c = client();
  const transport = new StreamableHTTPClientTransport(url, {
    fetch: fetchWith,
    requestInit: { headers: { Authorization: 'Bearer token-a' } },
    reconnectionOptions: {
      maxRetries: 0,
      initialReconnectionDelay: 1000,
      maxReconnectionDelay: 1000,
      reconnectionDelayGrowFactor: 1,
    },
  });
  c.onerror = () => {}; // the stream cut on purpose is reported here
  await c.connect(transport);
  return { client: c, transport };
}

const note = (text, delay = 0) => ({
  name: 'add_note',
  arguments: { note: text, delay_ms: delay },
});

async function writeTwiceOverStdio() {
  const c = await overStdio('stdio');
  try {
    const notebook = notebookOf('stdio');
    // Two requests, each with its own JSON-RPC id, and no `_meta`.
    const first = await c.callTool(note('twice over stdio'));
    const again = await c.callTool(note('twice over stdio'));
    expect(first.isError !== true && dedup(first) === false,
      `stdio, no _meta: a write runs (${text(first).slice(0, 60)})`);
    expect(dedup(again) === true,
      'its re-send is replayed: _meta["io.idem/deduplicated"] === true');
    expect(JSON.stringify(again.structuredContent) === JSON.stringify(first.structuredContent),
      'with the first result');
    expect(notesIn(notebook, 'twice over stdio') === 1, 'one execution in the notebook');
    // The account of the session: the call applied once, its re-send replayed.
    const account = await c.callTool({ name: 'idem_run_account', arguments: {} });
    const outcomes = (account.structuredContent?.calls ?? []).map((call) => call.outcome);
    expect(JSON.stringify(outcomes) === JSON.stringify(['applied', 'replayed']),
      `idem_run_account tells the session's calls: ${JSON.stringify(outcomes)}`);
  } finally {
    await c.close();
  }
}

async function modelKeyOverStdio() {
  const c = await overStdio('model-key', ['--model-key', 'add_note']);
  try {
    const notebook = notebookOf('model-key');
    const { tools } = await c.listTools();
    const schema = tools.find((t) => t.name === 'add_note')?.inputSchema ?? {};
    expect(schema.properties?.idempotency_key?.type === 'string'
      && !(schema.required ?? []).includes('idempotency_key'),
    '--model-key add_note: add_note lists an optional idempotency_key parameter');
    const keyed = (key) => ({
      name: 'add_note',
      arguments: { note: 'keyed by the model', delay_ms: 0, idempotency_key: key },
    });
    const one = await c.callTool(keyed('act-1'));
    const two = await c.callTool(keyed('act-1'));
    expect(one.isError !== true && dedup(two) === true
      && notesIn(notebook, 'keyed by the model') === 1,
    `two calls with one idempotency_key: one execution (${text(one).slice(0, 50)})`);
    const other = await c.callTool(keyed('act-2'));
    expect(dedup(other) === false && notesIn(notebook, 'keyed by the model') === 2,
      'a new idempotency_key with the same arguments: a new execution');
    const empty = await c.callTool(keyed(''));
    expect(empty.isError === true && text(empty).includes('idempotency_key')
      && notesIn(notebook, 'keyed by the model') === 2,
    'an empty idempotency_key: an error result naming it, nothing run '
    + `(${text(empty).slice(0, 50)})`);
  } finally {
    await c.close();
  }
}

async function overStreamableHttp() {
  const server = await httpServer('http');
  const notebook = notebookOf('http');
  try {
    // A call re-issued on its session.
    const one = await overHttp(server.url);
    expect(typeof one.transport.sessionId === 'string',
      `over HTTP the client has a session (Mcp-Session-Id; ${one.transport.protocolVersion})`);
    const first = await one.client.callTool(note('twice over HTTP'));
    const again = await one.client.callTool(note('twice over HTTP'));
    expect(first.isError !== true && dedup(first) === false && dedup(again) === true
      && notesIn(notebook, 'twice over HTTP') === 1,
    'HTTP, no _meta: a write re-issued on its session is replayed, one execution');
    await one.client.close();

    // The response stream of a slow call cut mid-call: the client never gets the answer
    // and re-issues the request (a new id) on the same session.
    let cut = 0;
    const cutting = async (input, init) => {
      const body = typeof init?.body === 'string' ? init.body : '';
      if (cut === 0 && body.includes('"cut mid-call"')) {
        cut += 1;
        const abort = new AbortController();
        const response = await fetch(input, { ...init, signal: abort.signal });
        // The request reached the server (it answered with headers); the stream breaks
        // before the SDK reads a byte of it.
        abort.abort(new Error('the response stream was cut by the check'));
        return response;
      }
      return fetch(input, init);
    };
    const two = await overHttp(server.url, cutting);
    let answered = false;
    const lost = two.client.callTool(note('cut mid-call', 1500)).then(
      () => { answered = true; },
      () => {},
    );
    // Wait until the cut has happened (bounded: only a hang fails by it); the lost call has
    // no answer to wait for.
    for (let i = 0; cut === 0 && i < 3000; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const reissued = await two.client.callTool(note('cut mid-call', 1500));
    expect(cut === 1 && !answered, 'the first request\'s response stream was cut: no answer');
    expect(reissued.isError !== true && dedup(reissued) === true,
      'the request re-issued on the same session gets the first call\'s result, deduplicated '
      + `(${text(reissued).slice(0, 50)})`);
    expect(notesIn(notebook, 'cut mid-call') === 1, 'one execution in the notebook');
    await two.client.close();
    await lost;

    // Another session inside the window is another call (the default scope).
    const three = await overHttp(server.url);
    const other = await three.client.callTool(note('twice over HTTP'));
    expect(dedup(other) === false && notesIn(notebook, 'twice over HTTP') === 2,
      'another session inside the window is another call: two executions');
    await three.client.close();
  } finally {
    await server.stop();
  }
}

/** Keys under the `_meta` names third-party MCP code uses: a second call with the same key
 * and other arguments is refused as a reused key (so the key was read, not the window), the
 * same call under it is replayed, and two names giving two keys are a protocol error. */
async function keyNamesOverStdio() {
  const c = await overStdio('key-names');
  try {
    const notebook = notebookOf('key-names');
    const ERROR = 'io.idem/error';
    for (const name of ['io.modelcontextprotocol/idempotencyKey', 'idempotencyKey']) {
      const under = (text) => ({ ...note(text), _meta: { [name]: `ts-${name}` } });
      const first = await c.callTool(under(`keyed under ${name}`));
      const again = await c.callTool(under(`keyed under ${name}`));
      expect(first.isError !== true && dedup(first) === false && dedup(again) === true
        && notesIn(notebook, `keyed under ${name}`) === 1,
      `_meta["${name}"]: the call runs once, its re-send is replayed`);
      const other = await c.callTool(under(`other arguments under ${name}`));
      expect(other.isError === true && other._meta?.[ERROR] === 'key_reused'
        && notesIn(notebook, `other arguments under ${name}`) === 0,
      `_meta["${name}"]: the same key with other arguments is refused as a reused key `
        + `(${other._meta?.[ERROR]})`);
    }
    const twoKeys = {
      ...note('two keys'),
      _meta: { 'io.modelcontextprotocol/idempotencyKey': 'ts-a', idempotencyKey: 'ts-b' },
    };
    let refused = '';
    try {
      await c.callTool(twoKeys);
    } catch (error) {
      refused = String(error?.message ?? error);
    }
    expect(refused.includes('io.modelcontextprotocol/idempotencyKey')
      && refused.includes('idempotencyKey') && notesIn(notebook, 'two keys') === 0,
    `two names giving two keys: a protocol error naming both, nothing runs (${refused.slice(0, 80)})`);
  } finally {
    await c.close();
  }
}

for (const check of [writeTwiceOverStdio, modelKeyOverStdio, keyNamesOverStdio, overStreamableHttp]) {
  try {
    await check();
  } catch (error) {
    expect(false, `${check.name} did not complete: ${error?.stack ?? error}`);
  }
}
if (failures.length > 0) {
  console.log(`${failures.length} problem(s)`);
  process.exit(1);
}
