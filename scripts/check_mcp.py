#!/usr/bin/env python3
"""Check idem's MCP server with the official Python MCP client (the `mcp` package).

Installs `mcp` (pinned below) into a virtual environment under `target/`, builds
`examples/mcp_server.rs`, and checks what a real client sees, each group on a fresh SQLite
file:

- Over stdio: the tools listed with their annotations, a call executed, the same call re-sent
  replayed with `io.idem/deduplicated`, an invalid argument an error result with its pointer,
  an irreversible call refused pending approval, and an unknown tool a protocol error.
- A client that sends no key (no `_meta`), as the hosts people use, over stdio: a write runs
  once and its re-send (a new request id) is replayed, one line in the notebook; other
  arguments are another call; an irreversible call is approved by the user once (one
  question) and its re-send replayed. With a 2 s window (`--resend-window 2`), the same call
  after the window runs again (two lines). With the window off (`--resend-window 0`), a
  write without a key is refused with how to pass one, and nothing runs. With `--model-key
  add_note`: `idempotency_key` is listed in add_note's schema (optional) and no other tool's;
  two calls with one id are one line, a new id is a new line (the window on, so the model's
  key comes first), and an empty, over-long or non-string id is an error result that runs
  nothing.
- No key over Streamable HTTP: a client on a revision with sessions (the Python client's
  `mode="legacy"`, `Mcp-Session-Id`) re-issuing a call on its session gets one line; a second
  session inside the window is another call (two lines). With `--resend-scope tenant`, the
  second session's call is replayed (one line), another tenant's is not, and a 2026-07-28
  client (that revision has no sessions) re-issuing a call gets one line.
- A cancelled call: the client cancels a slow call in flight (`notifications/cancelled`); the
  same call re-sent under the same key is not held as in progress but runs afresh and
  completes, and the notebook shows one execution: the cancel left no live claim and the
  cancelled call did not finish behind the client's back.
- Two clients racing one key: the same slow call sent at once by two clients, over HTTP (one
  server, two connections) and over stdio (two server processes on one SQLite file), runs
  once: one result fresh, the other a replay, one downstream key, one line in the notebook.
- Bad input: over raw stdio (no SDK), a line that is not JSON, a request whose `params` is a
  string, a `tools/call` whose params do not fit, and a line over 16 MiB are each answered
  with a JSON-RPC error (-32700 with id null; -32600 with the request's id; -32602 with its
  id; -32600), and the next request is answered. With the client: a `_meta` key of the wrong
  type is a protocol error naming it; 2 MB of arguments are an error result naming the limit
  (stdio and HTTP); an HTTP body over rmcp's 4 MiB limit is a protocol error naming the
  limit, and a body that is not JSON a JSON-RPC error; and the server serves the next call.
- Over Streamable HTTP with two bearer tokens: each request acts for its token's tenant (one
  key in two tenants is two calls), and a request without a known token is refused.
- The approval rounds: the client's elicitation callback answers the question (yes runs the
  call once, no denies it), and the rounds driven by hand show that a requestState answered
  twice or altered is refused.

Usage: python3 scripts/check_mcp.py   (from anywhere; exits non-zero on any problem)
"""

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import venvs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "target" / "mcp-venv"
PACKAGES = ["mcp==2.3.0"]  # brings httpx2, its HTTP client
KEY = "io.idem/idempotency-key"
TOOLS = ["add_note", "create_ticket", "delete_account", "get_weather", "idem_run_account"]
# What bounds every wait: generous, so that only a hang fails by it.
PATIENCE = 60


def install_mcp():
    """The venv's python, with `mcp` at its pin."""
    return venvs.installed(VENV, PACKAGES)


def ensure_mcp(script=__file__):
    """Re-run `script` (this one by default) inside a venv that has the packages."""
    if os.environ.get("IDEM_MCP_CHECK_VENV") == "1":
        return
    python = install_mcp()
    env = dict(os.environ, IDEM_MCP_CHECK_VENV="1")
    sys.exit(subprocess.run([str(python), str(script), *sys.argv[1:]], env=env).returncode)


def server_binary():
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    binary = target / "debug" / "examples" / "mcp_server"
    # `.ci/run` has just built every example with every feature (`cargo test --workspace
    # --all-features`): IDEM_CHECK_PREBUILT=1 uses that build instead of a second one.
    if not (os.environ.get("IDEM_CHECK_PREBUILT") == "1" and binary.exists()):
        cargo = ["cargo", "build", "--quiet", "-p", "idem-tests", "--example", "mcp_server", "--features", "mcp"]
        subprocess.run(cargo, cwd=ROOT, check=True)
    return str(binary)


def checker():
    """`expect(ok, what)`, which prints `ok   what` or `FAIL what`, and the list of failures."""
    problems = []

    def expect(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            problems.append(what)

    return expect, problems


def text_of(result):
    return " ".join(getattr(block, "text", "") for block in result.content)


def meta_of(result):
    return result.meta or {}


def notes_in(path, note):
    """How many times the example's `add_note` ran with `note` (one line per execution)."""
    if not Path(path).exists():
        return 0
    return sum(1 for line in Path(path).read_text().splitlines() if line.endswith(" " + note))


def stdio(binary, db, notes=None, args=(), **options):
    """A client of the example over stdio, started with `args` (`options` for `mcp.Client`,
    e.g. a callback)."""
    from mcp import Client, StdioServerParameters

    env = dict(os.environ, IDEM_DB=db)
    if notes:
        env["IDEM_NOTES"] = notes
    params = StdioServerParameters(command=binary, args=list(args), env=env)
    return Client(params, read_timeout_seconds=PATIENCE, **options)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def http_server(binary, db, notes=None, args=()):
    """The example over Streamable HTTP with two tokens (acme's, globex's), started with
    `args`; yields its URL."""
    port = free_port()
    env = dict(os.environ, IDEM_DB=db, IDEM_MCP_TOKENS="token-a=acme,token-b=globex")
    if notes:
        env["IDEM_NOTES"] = notes
    server = subprocess.Popen([binary, "--http", f"127.0.0.1:{port}", *args], env=env)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.terminate()
        server.wait(timeout=10)


def http_client(url, token, **options):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=PATIENCE)
    return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=PATIENCE,
                  **options)


def messages(error):
    """Every message inside an exception (groups included)."""
    inner = getattr(error, "exceptions", None)
    if inner:
        return " ".join(messages(e) for e in inner)
    return f"{type(error).__name__}: {error}"


async def check_stdio(binary, db):
    from mcp import MCPError

    expect, problems = checker()
    async with stdio(binary, db) as client:
        tools = (await client.list_tools()).tools
        names = [t.name for t in tools]
        expect(names == TOOLS, f"{len(TOOLS)} tools in order: {names}")
        by_name = {t.name: t for t in tools}
        for tool in tools:
            a = tool.annotations
            stated = a is not None and None not in (
                a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)
            expect(stated, f"{tool.name} states all four annotations")
        expect(by_name["get_weather"].annotations.read_only_hint is True, "a read is read-only")
        expect(by_name["create_ticket"].annotations.idempotent_hint is True,
               "an idempotent write says so")
        expect(by_name["delete_account"].annotations.destructive_hint is True,
               "an irreversible tool is destructive")

        args = {"customer_id": "cus_1", "subject": "Printer"}
        first = await client.call_tool("create_ticket", args, meta={KEY: "mcp-check-1"})
        expect(first.is_error is not True, "a keyed write runs")
        expect(meta_of(first).get("io.idem/deduplicated") is False, "first: not deduplicated")
        expect("cus_1" in str(first.structured_content), "structuredContent carries the output")
        again = await client.call_tool("create_ticket", args, meta={KEY: "mcp-check-1"})
        expect(meta_of(again).get("io.idem/deduplicated") is True, "a re-send is replayed")
        expect(again.structured_content == first.structured_content, "with the same output")

        invalid = await client.call_tool("create_ticket", {"customer_id": 7, "subject": "x"},
                                         meta={KEY: "mcp-check-4"})
        expect(invalid.is_error is True and "/customer_id" in text_of(invalid),
               "an invalid argument is an error result with its pointer")
        pending = await client.call_tool("delete_account", {"customer_id": "cus_1"},
                                         meta={KEY: "mcp-check-2"})
        expect(pending.is_error is True and "approval" in text_of(pending),
               "an irreversible call waits for approval")
        try:
            await client.call_tool("send_fax", {}, meta={KEY: "mcp-check-3"})
            expect(False, "an unknown tool is a protocol error")
        except MCPError as e:
            expect("unknown tool" in str(e), f"an unknown tool is a protocol error ({e})")

        # The model asks what became of this session's calls: the store's account of them.
        expect(by_name["idem_run_account"].annotations.read_only_hint is True,
               "the run account tool is read-only")
        account = await client.call_tool("idem_run_account", {})
        calls = (account.structured_content or {}).get("calls", [])
        outcomes = [(c.get("tool"), c.get("outcome")) for c in calls]
        expect(outcomes == [("create_ticket", "applied"), ("create_ticket", "replayed"),
                            ("create_ticket", "refused"), ("delete_account", "pending_approval")],
               f"the run account tool tells this session's calls as they went: {outcomes}")
        expect("in all: 1 applied, 1 replayed, 1 refused, 1 pending_approval"
               in text_of(account), f"and says it in words ({text_of(account)[-80:]})")
    return problems


def deduplicated(result):
    return meta_of(result).get("io.idem/deduplicated")


async def check_no_key_stdio(binary, tmp):
    """A client that sends no key, as every mainstream host: the re-send window over stdio."""
    expect, problems = checker()
    notes = str(Path(tmp) / "no-key-notes.txt")
    args = {"note": "sent twice without a key", "delay_ms": 0}
    async with stdio(binary, str(Path(tmp) / "no-key.db"), notes) as client:
        first = await client.call_tool("add_note", args)
        expect(first.is_error is not True and deduplicated(first) is False,
               f"no _meta: a write runs ({text_of(first)[:60]})")
        # The client lost the answer and sends the call again: a new request id, no key.
        again = await client.call_tool("add_note", args)
        expect(deduplicated(again) is True and again.structured_content == first.structured_content,
               "its re-send is replayed, with the first's result")
        expect(notes_in(notes, args["note"]) == 1, "the notebook shows one execution")
        other = await client.call_tool("add_note", {"note": "another note", "delay_ms": 0})
        expect(deduplicated(other) is False and notes_in(notes, "another note") == 1,
               "other arguments are another call")

    # An irreversible call without a key: the window keys the approval rounds too.
    from mcp import types

    asked = []

    async def yes(context, question):
        asked.append(question)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with stdio(binary, str(Path(tmp) / "no-key-approval.db"),
                     elicitation_callback=yes) as client:
        target = {"customer_id": "cus_no_key"}
        done = await client.call_tool("delete_account", target)
        expect(done.is_error is not True and "deleted cus_no_key" in text_of(done)
               and len(asked) == 1,
               f"no _meta: the user's yes runs an irreversible call ({text_of(done)[:60]})")
        again = await client.call_tool("delete_account", target)
        expect(deduplicated(again) is True and len(asked) == 1,
               "its re-send is replayed without a new question")

    # A short window, waited out: the same call after it is a new one.
    args = {"note": "again after the window", "delay_ms": 0}
    async with stdio(binary, str(Path(tmp) / "no-key-2s.db"), notes,
                     args=["--resend-window", "2"]) as client:
        first = await client.call_tool("add_note", args)
        again = await client.call_tool("add_note", args)
        expect(deduplicated(first) is False and deduplicated(again) is True,
               "a 2 s window: the re-send inside it is replayed")
        await asyncio.sleep(3)  # past the window of the first call (not a measurement)
        later = await client.call_tool("add_note", args)
        expect(later.is_error is not True and deduplicated(later) is False,
               "the same call after the window runs again")
    expect(notes_in(notes, args["note"]) == 2, "the notebook shows two executions")

    # The window off: a keyless write is refused, as before the window existed.
    async with stdio(binary, str(Path(tmp) / "no-key-off.db"), notes,
                     args=["--resend-window", "0"]) as client:
        ticket = {"customer_id": "cus_1", "subject": "Printer"}
        unkeyed = await client.call_tool("create_ticket", ticket)
        expect(unkeyed.is_error is True and KEY in text_of(unkeyed)
               and meta_of(unkeyed).get("io.idem/error") == "missing_key",
               "the window off (--resend-window 0): a write without a key is refused with how "
               "to pass one")
        refused = await client.call_tool("add_note", {"note": "never written", "delay_ms": 0})
        expect(refused.is_error is True and notes_in(notes, "never written") == 0,
               "and runs nothing")
        keyed = await client.call_tool("create_ticket", ticket, meta={KEY: "no-window-1"})
        expect(keyed.is_error is not True, "a keyed write still runs")

    # The model's key, with the window on: the key comes first.
    async with stdio(binary, str(Path(tmp) / "model-key.db"), notes,
                     args=["--model-key", "add_note"]) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        schema = tools["add_note"].input_schema
        parameter = schema.get("properties", {}).get("idempotency_key", {})
        expect(parameter.get("type") == "string"
               and "idempotency_key" not in schema.get("required", []),
               "--model-key add_note: add_note lists an optional idempotency_key")
        expect(all("idempotency_key" not in t.input_schema.get("properties", {})
                   for name, t in tools.items() if name != "add_note"),
               "and no other tool does")
        note = "keyed by the model"

        def keyed(key):
            return {"note": note, "delay_ms": 0, "idempotency_key": key}

        one = await client.call_tool("add_note", keyed("act-1"))
        two = await client.call_tool("add_note", keyed("act-1"))
        expect(one.is_error is not True and deduplicated(two) is True
               and notes_in(notes, note) == 1,
               f"two calls with one id: one execution ({text_of(one)[:60]})")
        new = await client.call_tool("add_note", keyed("act-2"))
        expect(deduplicated(new) is False and notes_in(notes, note) == 2,
               "a new id with the same arguments: a new execution")
        for bad, says in (("", "is empty"), ("k" * 201, "over the limit"),
                          (7, "must be a string")):
            refused = await client.call_tool("add_note", keyed(bad))
            expect(refused.is_error is True and says in text_of(refused)
                   and "idempotency_key" in text_of(refused),
                   f"an id {says}: an error result naming it ({text_of(refused)[:70]}...)")
        expect(notes_in(notes, note) == 2, "and the refused ids ran nothing")
    return problems


async def check_no_key_http(binary, tmp):
    """No key over Streamable HTTP: the session, another session, the tenant-wide scope."""
    expect, problems = checker()
    notes = str(Path(tmp) / "no-key-http-notes.txt")

    async def add(client, note):
        return await client.call_tool("add_note", {"note": note, "delay_ms": 0})

    # Clients before the 2026-07-28 revision have a session (`Mcp-Session-Id`); the Python
    # client speaks such a revision with mode="legacy".
    with http_server(binary, str(Path(tmp) / "no-key-http.db"), notes) as url:
        async with http_client(url, "token-a", mode="legacy") as one:
            first = await add(one, "session")
            again = await add(one, "session")
            expect(deduplicated(first) is False and deduplicated(again) is True,
                   "HTTP, no _meta: a call re-issued on its session is replayed")
            expect(notes_in(notes, "session") == 1, "HTTP: one execution")
        async with http_client(url, "token-a", mode="legacy") as two:
            other = await add(two, "session")
            expect(deduplicated(other) is False and notes_in(notes, "session") == 2,
                   "another session inside the window is another call (two executions)")
        # The 2026-07-28 revision has no sessions: with the default scope, its requests are
        # scoped by the tenant, so its client's re-issue is still caught.
        async with http_client(url, "token-a") as modern:
            await add(modern, "sessionless")
            again = await add(modern, "sessionless")
            expect(modern.protocol_version == "2026-07-28"
                   and deduplicated(again) is True and notes_in(notes, "sessionless") == 1,
                   f"a {modern.protocol_version} client (no session) re-issuing a call is "
                   "replayed by the default scope (one execution)")
    with http_server(binary, str(Path(tmp) / "no-key-tenant.db"), notes,
                     args=["--resend-scope", "tenant"]) as url:
        async with http_client(url, "token-a", mode="legacy") as one:
            await add(one, "tenant-wide")
        async with http_client(url, "token-a", mode="legacy") as two:
            other = await add(two, "tenant-wide")
            expect(deduplicated(other) is True and notes_in(notes, "tenant-wide") == 1,
                   "--resend-scope tenant: another session's identical call is replayed "
                   "(one execution)")
        async with http_client(url, "token-b", mode="legacy") as globex:
            theirs = await add(globex, "tenant-wide")
            expect(deduplicated(theirs) is False and notes_in(notes, "tenant-wide") == 2,
                   "another tenant's identical call is its own")
        # The 2026-07-28 revision has no sessions (each request stands alone): the tenant
        # scope is what catches its client's re-issue.
        async with http_client(url, "token-a") as modern:
            first = await add(modern, "no sessions")
            again = await add(modern, "no sessions")
            expect(modern.protocol_version == "2026-07-28"
                   and deduplicated(again) is True and notes_in(notes, "no sessions") == 1,
                   f"--resend-scope tenant: a {modern.protocol_version} client's re-issued "
                   "call is replayed (one execution)")
    return problems


async def check_cancel(binary, db, notes):
    """A call the client cancels leaves nothing behind: the re-sent call runs, promptly."""
    expect, problems = checker()
    args = {"note": "cancelled-then-re-sent", "delay_ms": 3000}
    meta = {KEY: "mcp-cancel-1"}
    async with stdio(binary, db, notes) as client:
        # The client gives up on a call in flight: cancelling the task that awaits it sends
        # `notifications/cancelled` for the request.
        call = asyncio.create_task(client.call_tool("add_note", args, meta=meta))
        await asyncio.sleep(0.5)
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        expect(call.cancelled(), "the client cancels a call in flight")
        # Were the claim left live (the dispatch running on, or dropped without giving its
        # key back), this call would wait for it and be refused as in progress, or replay
        # what the cancelled call went on to do.
        again = await asyncio.wait_for(client.call_tool("add_note", args, meta=meta), PATIENCE)
        expect(again.is_error is not True,
               f"the same call re-sent under the same key completes ({text_of(again)[:80]})")
        expect(meta_of(again).get("io.idem/deduplicated") is False,
               "it ran afresh: the cancelled call did not finish behind the client's back")
    expect(notes_in(notes, args["note"]) == 1, "the notebook shows one execution")
    return problems


async def race(clients, note):
    """The same slow `add_note` under one key from every client at once: their results."""
    args = {"note": note, "delay_ms": 1500}
    meta = {KEY: f"mcp-race-{note}"}
    calls = [c.call_tool("add_note", args, meta=meta) for c in clients]
    return await asyncio.wait_for(asyncio.gather(*calls), PATIENCE)


def expect_one_execution(expect, results, notes, note, over):
    flags = sorted(str(meta_of(r).get("io.idem/deduplicated")) for r in results)
    expect(all(r.is_error is not True for r in results), f"{over}: both racing calls complete")
    expect(flags == ["False", "True"], f"{over}: one ran, the other replayed it ({flags})")
    keys = {meta_of(r).get("io.idem/key") for r in results}
    expect(len(keys) == 1 and None not in keys, f"{over}: under one downstream key")
    expect(results[0].structured_content == results[1].structured_content,
           f"{over}: with one output")
    expect(notes_in(notes, note) == 1, f"{over}: the notebook shows one execution")


async def check_race(binary, tmp):
    """Two clients send the same call under one key at once: it runs once."""
    expect, problems = checker()
    notes = str(Path(tmp) / "race-notes.txt")
    with http_server(binary, str(Path(tmp) / "race-http.db"), notes) as url:
        async with http_client(url, "token-a") as one, http_client(url, "token-a") as two:
            results = await race([one, two], "raced-over-http")
    expect_one_execution(expect, results, notes, "raced-over-http", "HTTP, two connections")
    # Two server processes share a store only through its file.
    db = str(Path(tmp) / "race-stdio.db")
    async with stdio(binary, db, notes) as one, stdio(binary, db, notes) as two:
        results = await race([one, two], "raced-over-stdio")
    expect_one_execution(expect, results, notes, "raced-over-stdio",
                         "stdio, two processes on one SQLite file")
    return problems


# The 2026-07-28 revision has no handshake: every request carries these in its `_meta`.
INLINE_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "check_mcp.py", "version": "0"},
}


async def check_bad_lines(binary, db):
    """Raw stdio, no SDK: every line a broken client writes is answered, and nothing is lost."""
    expect, problems = checker()
    server = await asyncio.create_subprocess_exec(
        binary, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=dict(os.environ, IDEM_DB=db), limit=1 << 20)

    async def send(line):
        server.stdin.write(line + b"\n")
        await server.stdin.drain()

    async def answer():
        """The next line the server writes, as JSON; None if none comes within 10 s."""
        try:
            line = await asyncio.wait_for(server.stdout.readline(), 10)
        except TimeoutError:
            return None
        return json.loads(line) if line else None

    def request(id, method, params):
        return json.dumps({"jsonrpc": "2.0", "id": id, "method": method,
                           "params": params}).encode()

    def error_of(answer):
        error = (answer or {}).get("error") or {}
        return error.get("code"), error.get("message", ""), (answer or {}).get("id")

    try:
        await send(b"this is not json")
        parsed = await answer() or {}
        code, message, _ = error_of(parsed)
        expect(code == -32700 and "id" in parsed and parsed["id"] is None,
               f"a line that is not JSON is answered with a parse error, id null ({message})")
        await send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                               "params": "x"}).encode())
        code, message, id = error_of(await answer())
        expect(code == -32600 and id == 1 and "params" in message,
               f"a request whose params is a string: invalid request, with its id ({message})")
        await send(request(2, "tools/call", {"name": 5, "_meta": INLINE_META}))
        code, message, id = error_of(await answer())
        expect(code == -32602 and id == 2 and "tools/call" in message,
               f"a tools/call whose name is a number: invalid params, with its id ({message})")
        await send(b'"' + b"x" * (16 << 20) + b'"')
        code, message, _ = error_of(await answer())
        expect(code == -32600 and "16777216" in message,
               f"a line over 16 MiB is discarded and answered ({message[:60]})")
        await send(request(3, "tools/list", {"_meta": INLINE_META}))
        listed = await answer() or {}
        names = [t["name"] for t in (listed.get("result") or {}).get("tools", [])]
        expect(listed.get("id") == 3 and names == TOOLS,
               "the next request is answered: nothing was lost")
        expect(server.returncode is None, "and the server still serves")
    finally:
        server.stdin.close()
        try:
            await asyncio.wait_for(server.wait(), 10)
        except TimeoutError:
            server.kill()
    return problems


async def expect_big_arguments_refused(expect, client, over):
    """2 MB of arguments: an error result naming the limit; then the next call is served."""
    args = {"customer_id": "cus_big", "subject": "x" * (2 << 20)}
    big = await client.call_tool("create_ticket", args, meta={KEY: f"mcp-big-{over}"})
    expect(big.is_error is True and "over the limit of 1048576 bytes" in text_of(big),
           f"{over}: 2 MB of arguments are an error result naming the limit "
           f"({text_of(big)[:70]}...)")
    weather = await client.call_tool("get_weather", {"city": "Oslo"})
    expect(weather.is_error is not True, f"{over}: and the next call is served")


async def check_bad_calls(binary, tmp):
    """A client's malformed calls are clear errors, and the server serves the next call."""
    from mcp import MCPError

    expect, problems = checker()
    async with stdio(binary, str(Path(tmp) / "bad-stdio.db")) as client:
        args = {"customer_id": "cus_3", "subject": "Toner"}
        try:
            await client.call_tool("create_ticket", args, meta={KEY: 5})
            expect(False, "a key that is a number is a protocol error naming the field")
        except MCPError as e:
            expect(KEY in str(e), f"a key that is a number is a protocol error naming it ({e})")
        await expect_big_arguments_refused(expect, client, "stdio")
    with http_server(binary, str(Path(tmp) / "bad-http.db")) as url:
        async with http_client(url, "token-a") as client:
            await expect_big_arguments_refused(expect, client, "HTTP")
            args = {"customer_id": "cus_huge", "subject": "x" * (5 << 20)}
            try:
                huge = await client.call_tool("create_ticket", args, meta={KEY: "mcp-huge"})
                expect(False, f"HTTP: a body over 4 MiB is refused (got {text_of(huge)[:60]})")
            except MCPError as e:
                expect("4194304" in str(e), f"HTTP: a body over 4 MiB is refused, saying so ({e})")
            weather = await client.call_tool("get_weather", {"city": "Oslo"})
            expect(weather.is_error is not True, "HTTP: and the next call is served")
        # Below the SDK: a POST whose body is not JSON.
        import httpx2
        async with httpx2.AsyncClient(timeout=PATIENCE) as http:
            headers = {"Authorization": "Bearer token-a", "Content-Type": "application/json",
                       "Accept": "application/json, text/event-stream"}
            refused = await http.post(url, content=b"this is not json", headers=headers)
            try:
                error = refused.json().get("error") or {}
            except ValueError:
                error = {}
            expect(400 <= refused.status_code < 500 and error.get("code") == -32600,
                   f"HTTP: a body that is not JSON is a JSON-RPC error ({refused.status_code}: "
                   f"{error.get('message', refused.text)[:60]})")
    return problems


async def check_http(binary, db):
    expect, problems = checker()
    with http_server(binary, db) as url:
        args = {"customer_id": "cus_2", "subject": "Scanner"}
        meta = {KEY: "mcp-http-1"}
        async with http_client(url, "token-a") as acme:
            names = [t.name for t in (await acme.list_tools()).tools]
            expect(names == TOOLS, f"over HTTP the tools are listed: {names}")
            first = await acme.call_tool("create_ticket", args, meta=meta)
            expect(meta_of(first).get("io.idem/deduplicated") is False, "acme's call runs")
            again = await acme.call_tool("create_ticket", args, meta=meta)
            expect(meta_of(again).get("io.idem/deduplicated") is True,
                   "acme's re-send is replayed")
        async with http_client(url, "token-b") as globex:
            theirs = await globex.call_tool("create_ticket", args, meta=meta)
            expect(meta_of(theirs).get("io.idem/deduplicated") is False,
                   "the same key for another tenant is another call")
            expect(meta_of(theirs).get("io.idem/key") != meta_of(first).get("io.idem/key"),
                   "with another downstream key")
        # The approval rounds over HTTP: the user's yes runs the call once, for acme only.
        from mcp import types

        async def yes(context, question):
            return types.ElicitResult(action="accept", content={"approve": True})

        target = {"customer_id": "cus_http"}
        async with http_client(url, "token-a", elicitation_callback=yes) as acme:
            done = await acme.call_tool("delete_account", target, meta={KEY: "mcp-http-del"})
            expect(done.is_error is not True and "deleted cus_http" in text_of(done),
                   "over HTTP the user's yes runs the irreversible call")
            again = await acme.call_tool("delete_account", target, meta={KEY: "mcp-http-del"})
            expect(meta_of(again).get("io.idem/deduplicated") is True,
                   "over HTTP the approved call re-sent is replayed")
        for token in (None, "token-x"):
            try:
                async with http_client(url, token) as stranger:
                    await stranger.list_tools()
                expect(False, f"a request with token {token!r} is refused")
            except Exception as e:  # the client raises the server's refusal in a group
                expect("unauthenticated" in messages(e), f"a request with token {token!r} is refused")
    return problems


async def check_approval(binary, db):
    """The approval rounds: the official client's elicitation callback answers idem's question."""
    from mcp import MCPError, types

    expect, problems = checker()
    asked = []

    def answering(answer):
        async def callback(context, question):
            asked.append(question)
            return answer
        return callback

    yes = types.ElicitResult(action="accept", content={"approve": True})
    args = {"customer_id": "cus_9"}
    async with stdio(binary, db, elicitation_callback=answering(yes)) as client:
        done = await client.call_tool("delete_account", args, meta={KEY: "mcp-approve-1"})
        expect(done.is_error is not True and "deleted cus_9" in text_of(done),
               "the user's yes runs the irreversible call")
        shown = asked[0].message if asked else ""
        expect(len(asked) == 1 and "delete_account" in shown and '"cus_9"' in shown
               and "mcp-approve-1" in shown,
               "the question shows the tool, its exact arguments and its key")
        again = await client.call_tool("delete_account", args, meta={KEY: "mcp-approve-1"})
        expect((again.meta or {}).get("io.idem/deduplicated") is True and len(asked) == 1,
               "the call re-sent is replayed without a new question")

        # The rounds by hand: the same state answered twice, and a forged one.
        meta = {KEY: "mcp-approve-2"}
        first = await client.session.call_tool("delete_account", args, meta=meta,
                                               allow_input_required=True)
        state = getattr(first, "request_state", None)
        expect(state is not None and "io.idem/approval" in (first.input_requests or {}),
               "round one is input_required with the question and a requestState")
        answer = {"io.idem/approval": yes}
        ran = await client.session.call_tool("delete_account", args, meta=meta,
                                             input_responses=answer, request_state=state,
                                             allow_input_required=True)
        expect(getattr(ran, "is_error", True) is not True, "round two with a yes runs the call")
        replayed = await client.session.call_tool("delete_account", args, meta=meta,
                                                  input_responses=answer, request_state=state,
                                                  allow_input_required=True)
        expect(getattr(replayed, "is_error", False) is True
               and (replayed.meta or {}).get("io.idem/error") == "approval_answered",
               "the same requestState again is refused")
        try:
            await client.session.call_tool("delete_account", args, meta={KEY: "mcp-approve-3"},
                                           input_responses=answer, request_state=state + "x",
                                           allow_input_required=True)
            expect(False, "an altered requestState is a protocol error")
        except MCPError as e:
            expect("not issued by this server" in str(e), f"an altered requestState is a protocol error ({e})")

    no = types.ElicitResult(action="decline")
    async with stdio(binary, db, elicitation_callback=answering(no)) as client:
        denied = await client.call_tool("delete_account", {"customer_id": "cus_10"},
                                        meta={KEY: "mcp-approve-4"})
        expect(denied.is_error is True
               and (denied.meta or {}).get("io.idem/error") == "approval_denied",
               "the user's no denies the call")
    return problems


def main():
    ensure_mcp()
    binary = server_binary()
    with tempfile.TemporaryDirectory(prefix="idem-mcp-check-") as tmp:
        problems = asyncio.run(check_stdio(binary, str(Path(tmp) / "idem.db")))
        problems += asyncio.run(check_no_key_stdio(binary, tmp))
        problems += asyncio.run(check_no_key_http(binary, tmp))
        problems += asyncio.run(check_cancel(binary, str(Path(tmp) / "cancel.db"),
                                             str(Path(tmp) / "cancel-notes.txt")))
        problems += asyncio.run(check_race(binary, tmp))
        problems += asyncio.run(check_bad_lines(binary, str(Path(tmp) / "bad-lines.db")))
        problems += asyncio.run(check_bad_calls(binary, tmp))
        problems += asyncio.run(check_http(binary, str(Path(tmp) / "idem-http.db")))
        problems += asyncio.run(check_approval(binary, str(Path(tmp) / "idem-approval.db")))
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        sys.exit(1)
    print("the MCP server answers the official Python client as documented")


if __name__ == "__main__":
    main()
