#!/usr/bin/env python3
"""Check idem's MCP server with the official Python MCP client (the `mcp` package).

Installs `mcp` (pinned below) into a virtual environment under `target/`, builds
`examples/mcp_server.rs`, starts it over stdio on a fresh SQLite file, and checks what a
real client sees: the tools listed with their annotations, a call executed, the same call
re-sent replayed with `io.idem/deduplicated`, a write without a key refused with how to pass
one, an irreversible call refused pending approval, and an unknown tool a protocol error.
Then it serves the example over Streamable HTTP with two bearer tokens and checks that each
request acts for its token's tenant (one key in two tenants is two calls) and that a request
without a known token is refused. Last, the approval rounds: the client's elicitation callback
answers the question (yes runs the call once, no denies it), and the rounds driven by hand show
that a requestState answered twice or altered is refused.

Usage: python3 scripts/check_mcp.py   (from anywhere; exits non-zero on any problem)
"""

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "target" / "mcp-venv"
PACKAGES = ["mcp==2.3.0"]  # brings httpx2, its HTTP client
KEY = "io.idem/idempotency-key"


def ensure_mcp():
    """Re-run this script inside a venv that has the packages."""
    if os.environ.get("IDEM_MCP_CHECK_VENV") == "1":
        return
    python = VENV / "bin" / "python"
    if not python.exists():
        VENV.parent.mkdir(parents=True, exist_ok=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    pip = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", *PACKAGES]
    subprocess.run([str(python), *pip], check=True)
    env = dict(os.environ, IDEM_MCP_CHECK_VENV="1")
    sys.exit(subprocess.run([str(python), __file__, *sys.argv[1:]], env=env).returncode)


def server_binary():
    cargo = ["cargo", "build", "--quiet", "--example", "mcp_server", "--features", "mcp"]
    subprocess.run(cargo, cwd=ROOT, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return str(target / "debug" / "examples" / "mcp_server")


def text_of(result):
    return " ".join(getattr(block, "text", "") for block in result.content)


async def check(binary, db):
    from mcp import Client, StdioServerParameters
    from mcp import MCPError

    params = StdioServerParameters(command=binary, args=[], env=dict(os.environ, IDEM_DB=db))
    problems = []

    def expect(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            problems.append(what)

    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        names = [t.name for t in tools]
        expect(names == sorted(names) and len(names) == 3, f"three tools in order: {names}")
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
        expect((first.meta or {}).get("io.idem/deduplicated") is False, "first: not deduplicated")
        expect("cus_1" in str(first.structured_content), "structuredContent carries the output")
        again = await client.call_tool("create_ticket", args, meta={KEY: "mcp-check-1"})
        expect((again.meta or {}).get("io.idem/deduplicated") is True, "a re-send is replayed")
        expect(again.structured_content == first.structured_content, "with the same output")

        invalid = await client.call_tool("create_ticket", {"customer_id": 7, "subject": "x"},
                                         meta={KEY: "mcp-check-4"})
        expect(invalid.is_error is True and "/customer_id" in text_of(invalid),
               "an invalid argument is an error result with its pointer")
        unkeyed = await client.call_tool("create_ticket", args)
        expect(unkeyed.is_error is True and KEY in text_of(unkeyed),
               "a write without a key is refused with how to pass one")
        pending = await client.call_tool("delete_account", {"customer_id": "cus_1"},
                                         meta={KEY: "mcp-check-2"})
        expect(pending.is_error is True and "approval" in text_of(pending),
               "an irreversible call waits for approval")
        try:
            await client.call_tool("send_fax", {}, meta={KEY: "mcp-check-3"})
            expect(False, "an unknown tool is a protocol error")
        except MCPError as e:
            expect("unknown tool" in str(e), f"an unknown tool is a protocol error ({e})")
    return problems


async def check_approval(binary, db):
    """The approval rounds: the official client's elicitation callback answers idem's question."""
    from mcp import Client, MCPError, StdioServerParameters, types

    params = StdioServerParameters(command=binary, args=[], env=dict(os.environ, IDEM_DB=db))
    problems = []

    def expect(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            problems.append(what)

    asked = []

    def answering(answer):
        async def callback(context, question):
            asked.append(question)
            return answer
        return callback

    yes = types.ElicitResult(action="accept", content={"approve": True})
    args = {"customer_id": "cus_9"}
    async with Client(params, elicitation_callback=answering(yes)) as client:
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
    async with Client(params, elicitation_callback=answering(no)) as client:
        denied = await client.call_tool("delete_account", {"customer_id": "cus_10"},
                                        meta={KEY: "mcp-approve-4"})
        expect(denied.is_error is True
               and (denied.meta or {}).get("io.idem/error") == "approval_denied",
               "the user's no denies the call")
    return problems


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def messages(error):
    """Every message inside an exception (groups included)."""
    inner = getattr(error, "exceptions", None)
    if inner:
        return " ".join(messages(e) for e in inner)
    return f"{type(error).__name__}: {error}"


async def check_http(binary, db):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    problems = []

    def expect(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            problems.append(what)

    port = free_port()
    env = dict(os.environ, IDEM_DB=db, IDEM_MCP_TOKENS="token-a=acme,token-b=globex")
    server = subprocess.Popen([binary, "--http", f"127.0.0.1:{port}"], env=env)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/mcp"

        def client(token):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            http = httpx2.AsyncClient(headers=headers)
            return Client(streamable_http_client(url, http_client=http))

        args = {"customer_id": "cus_2", "subject": "Scanner"}
        meta = {KEY: "mcp-http-1"}
        async with client("token-a") as acme:
            names = [t.name for t in (await acme.list_tools()).tools]
            expect(len(names) == 3, f"over HTTP the tools are listed: {names}")
            first = await acme.call_tool("create_ticket", args, meta=meta)
            expect((first.meta or {}).get("io.idem/deduplicated") is False, "acme's call runs")
            again = await acme.call_tool("create_ticket", args, meta=meta)
            expect((again.meta or {}).get("io.idem/deduplicated") is True,
                   "acme's re-send is replayed")
        async with client("token-b") as globex:
            theirs = await globex.call_tool("create_ticket", args, meta=meta)
            expect((theirs.meta or {}).get("io.idem/deduplicated") is False,
                   "the same key for another tenant is another call")
            expect((theirs.meta or {}).get("io.idem/key") != (first.meta or {}).get("io.idem/key"),
                   "with another downstream key")
        for token in (None, "token-x"):
            try:
                async with client(token) as stranger:
                    await stranger.list_tools()
                expect(False, f"a request with token {token!r} is refused")
            except Exception as e:  # the client raises the server's refusal in a group
                expect("unauthenticated" in messages(e), f"a request with token {token!r} is refused")
    finally:
        server.terminate()
        server.wait(timeout=10)
    return problems


def main():
    ensure_mcp()
    binary = server_binary()
    with tempfile.TemporaryDirectory(prefix="idem-mcp-check-") as tmp:
        problems = asyncio.run(check(binary, str(Path(tmp) / "idem.db")))
        problems += asyncio.run(check_http(binary, str(Path(tmp) / "idem-http.db")))
        problems += asyncio.run(check_approval(binary, str(Path(tmp) / "idem-approval.db")))
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        sys.exit(1)
    print("the MCP server answers the official Python client as documented")


if __name__ == "__main__":
    main()
