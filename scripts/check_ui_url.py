#!/usr/bin/env python3
"""Check approval one click away, end to end: the official Python MCP client, which answers
URL-mode elicitations, sent by `examples/mcp_server.rs --inbox URL` to the approval inbox
(`idem ui`), where a person in headless Chromium (scripts/check_ui_url.mjs, playwright-core)
signs in and decides the call.

Installs what scripts/check_mcp.py and scripts/check_ui.py install (`mcp` pinned in a venv
under `target/`, playwright-core pinned under `target/ui-check`, Debian's `chromium` if
missing); builds the example and `idem` unless IDEM_CHECK_PREBUILT=1 finds them. On a fresh
SQLite file under `target/ui-url-check`, shared by the example (over stdio, `IDEM_DB`, each
execution of delete_account a line in `IDEM_NOTES`) and `idem ui` (the example's approval key,
a random token):

1. Approved: the client calls delete_account {"customer_id": "cus_1"} without `_meta`; its
   elicitation callback is asked in URL mode with a link to the inbox's `/approval` page for
   tenant `local`, and nothing has run yet. The browser opens the link: 401 with the sign-in
   form (its hidden `next` the link's page) and no decision form; signs in with the token:
   200 back at the link's page, one pending call shown, delete_account for local with
   "customer_id": "cus_1"; clicks Approve: "Approved delete_account for local by ...". The
   callback then accepts, the client retries with the requestState: the result is not an
   error ("deleted cus_1"), one execution. Re-sent: replayed (`io.idem/deduplicated`), no
   new question, still one execution.
2. Denied: cus_2 the same way, the browser denies it with a reason: the retry is an error
   result `approval_denied` with the reason; no execution.
3. Undecided and altered links: cus_3's first round by hand (`allow_input_required`); the
   retry before anyone decides is an error result with the link again, nothing runs. Signed
   in, the browser sees the genuine link's page with its decision forms; the link with its
   signature changed, its `exp` changed or its `tenant` changed is 403 with no decision
   form; cus_3 never runs.
4. Expired: a second client of the example started with `--inbox-link-secs 1` gets a link
   for cus_4; once it has expired (the check waits 2 s) the browser gets 410, "expired", no
   decision form.

Screenshots of the call's page go to target/ui-url-check/. Usage: python3
scripts/check_ui_url.py   (from anywhere; exits non-zero on the first problem, with a FAIL
line)
"""

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, str(Path(__file__).resolve().parent))

import check_mcp  # noqa: E402  (the venv with `mcp`, the example's binary)
import check_ui  # noqa: E402  (chromium, playwright-core, idem ui's helpers)

ROOT = check_ui.ROOT
WORK = ROOT / "target" / "ui-url-check"
# The MCP example's approval key (examples/mcp_server.rs), so the inbox checks its links.
APPROVAL_KEY = "mcp-2026-12:6578616d706c652d617070726f76616c2d6b65792d6e6f742d73656372657421"
WHO = "dana@support-desk"
REASON = "the customer asked to keep the account"
APPROVAL = "io.idem/approval"
Failed = check_ui.Failed
expect = check_ui.expect


def executions(notes, customer):
    """How many times delete_account ran for `customer` (a line each in IDEM_NOTES)."""
    if not notes.exists():
        return 0
    return notes.read_text().splitlines().count(f"delete_account {customer}")


class Browser:
    """check_ui_url.mjs, asked one JSON line at a time."""

    def __init__(self, process):
        self.process = process

    async def ask(self, **request):
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        await self.process.stdin.drain()
        line = await asyncio.wait_for(self.process.stdout.readline(), 60)
        if not line:
            raise Failed(f"the browser stopped without answering {request['op']}")
        answer = json.loads(line)
        if "stopped" in answer:
            raise Failed(f"the browser could not {request['op']}: {answer['stopped']}")
        return answer


def text_of(result):
    return " ".join(getattr(block, "text", "") for block in result.content)


def client(binary, db, notes, inbox, *args, callback=None):
    from mcp import Client, StdioServerParameters

    env = dict(os.environ, IDEM_DB=str(db), IDEM_NOTES=str(notes))
    params = StdioServerParameters(command=binary, args=["--inbox", inbox, *args], env=env)
    options = {"elicitation_callback": callback} if callback else {}
    return Client(params, read_timeout_seconds=check_mcp.PATIENCE, **options)


def link_of(first):
    """The URL of the approval question in a first round's `input_required` result."""
    requests = getattr(first, "input_requests", None) or {}
    params = getattr(requests.get(APPROVAL), "params", None)
    return getattr(params, "mode", None), getattr(params, "url", None)


async def check(binary, idem, modules):
    from mcp import types

    WORK.mkdir(parents=True, exist_ok=True)
    db, notes = WORK / "url.db", WORK / "notes.txt"
    for old in [notes, *WORK.glob("url.db*"), *WORK.glob("*.png")]:
        old.unlink(missing_ok=True)
    token = secrets.token_hex(16)
    port = check_ui.free_port()
    inbox = f"http://127.0.0.1:{port}"
    accept = types.ElicitResult(action="accept")
    asked = []  # (mode, url, executions at the time) per question
    person = {}  # what the browser saw, per customer
    decision = {}  # what the person does, per customer

    async with contextlib.AsyncExitStack() as stack:

        async def opens(context, question):
            """The client's elicitation callback: sends the person to the URL and returns
            once they have decided there."""
            customer = decision["customer"]
            asked.append((getattr(question, "mode", None), getattr(question, "url", None),
                          executions(notes, customer)))
            if getattr(question, "mode", None) == "url":
                try:
                    person[customer] = await browser.ask(op="decide", url=question.url,
                                                         decision=decision["what"],
                                                         reason=REASON, shot=f"{customer}.png")
                except Failed as e:  # reported by the checks of what the person saw
                    print(f"note {e}", flush=True)
                return accept
            return types.ElicitResult(action="decline")  # no page to send the person to

        mcp = await stack.enter_async_context(client(binary, db, notes, inbox, callback=opens))
        # The example has created the store; the inbox opens it, never creating one.
        env = dict(os.environ, IDEM_UI_TOKEN=token, IDEM_APPROVAL_KEY=APPROVAL_KEY)
        for name in ("IDEM_APPROVER", "IDEM_UI_TOKENS", "IDEM_STORE"):
            env.pop(name, None)
        log = stack.enter_context(open(WORK / "ui.log", "w"))
        ui = subprocess.Popen(
            [str(idem), "ui", "--store", f"sqlite:{db.name}", "--listen", f"127.0.0.1:{port}",
             "--as", WHO], env=env, stdout=log, stderr=log, cwd=db.parent)
        stack.callback(check_ui.stop, ui)
        expect(check_ui.answers(inbox, ui), f"idem ui answers at {inbox}")
        node_env = dict(os.environ, IDEM_UI_URL=inbox, IDEM_UI_TOKEN=token,
                        IDEM_UI_OUT=str(WORK), IDEM_UI_MODULES=str(modules),
                        IDEM_UI_CHROMIUM=str(check_ui.CHROMIUM))
        node = await asyncio.create_subprocess_exec(
            "node", str(ROOT / "scripts" / "check_ui_url.mjs"), env=node_env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, limit=1 << 20)
        browser = Browser(node)

        async def close_browser():
            node.stdin.close()
            try:
                await asyncio.wait_for(node.wait(), 15)
            except asyncio.TimeoutError:
                node.kill()
                await node.wait()

        stack.push_async_callback(close_browser)

        # 1. Approved in the browser, run once, a re-send replayed.
        decision.update(customer="cus_1", what="approve")
        done = await mcp.call_tool("delete_account", {"customer_id": "cus_1"})
        mode, url, ran_before = asked[0] if asked else (None, None, None)
        expect(len(asked) == 1 and mode == "url"
               and (url or "").startswith(f"{inbox}/approval?tenant=local&"),
               f"the client is asked once, in URL mode, to open the inbox's page of the call: {url}")
        expect(ran_before == 0, "nothing has run while the question is open")
        seen = person.get("cus_1", {})
        link = urlsplit(url or "")
        first = seen.get("first", {})
        expect(first.get("status") == 401 and first.get("tokenField") == 1
               and first.get("forms") == 0,
               f"the browser opening the link without a session gets 401, the sign-in form and "
               f"no decision form: {first}")
        expect(first.get("next") == f"{link.path}?{link.query}",
               "the sign-in form returns to the link's page (its hidden next)")
        signed = seen.get("signedIn", {})
        expect(signed.get("status") == 200 and signed.get("at") == f"{link.path}?{link.query}",
               f"signed in with the token, the browser is back at the link's page ({signed.get('status')})")
        calls = signed.get("calls", [])
        expect(len(calls) == 1 and calls[0]["tool"] == "delete_account"
               and calls[0]["tenant"] == "local"
               and '"customer_id": "cus_1"' in (calls[0]["arguments"] or ""),
               f"the page shows the exact call, delete_account for local with cus_1: {calls}")
        expect(signed.get("approve") == 1 and signed.get("deny") == 1,
               "with an Approve and a Deny button")
        notice = seen.get("decided", {}).get("notice") or ""
        expect(notice.startswith(f"Approved delete_account for local by {WHO}"),
               f"Approve clicked: \"{notice}\"")
        expect(done.is_error is not True and "deleted cus_1" in text_of(done),
               f"the client's retry with the requestState runs the call: {text_of(done)}")
        expect(executions(notes, "cus_1") == 1, "once")
        again = await mcp.call_tool("delete_account", {"customer_id": "cus_1"})
        expect(again.is_error is not True
               and (again.meta or {}).get("io.idem/deduplicated") is True and len(asked) == 1,
               "the call re-sent is replayed (io.idem/deduplicated), without a new question")
        expect(executions(notes, "cus_1") == 1, "and still ran once")

        # 2. Denied in the browser: the retry is refused with the reason.
        decision.update(customer="cus_2", what="deny")
        denied = await mcp.call_tool("delete_account", {"customer_id": "cus_2"})
        notice = person.get("cus_2", {}).get("decided", {}).get("notice") or ""
        expect(notice == f"Denied delete_account for local by {WHO}: {REASON}",
               f"a second call, Deny clicked with a reason: \"{notice}\"")
        expect(denied.is_error is True
               and (denied.meta or {}).get("io.idem/error") == "approval_denied"
               and REASON in text_of(denied),
               f"the client's retry is refused, approval_denied, with the reason: {text_of(denied)}")
        expect(executions(notes, "cus_2") == 0, "and the call never ran")

        # 3. Undecided: the retry is told so; altered links show nothing.
        decision.update(customer="cus_3", what="none")
        args = {"customer_id": "cus_3"}
        first_round = await mcp.session.call_tool("delete_account", args,
                                                  allow_input_required=True)
        mode, url = link_of(first_round)
        state = getattr(first_round, "request_state", None)
        expect(mode == "url" and url and state, "a third call's first round: a URL and a requestState")
        early = await mcp.session.call_tool("delete_account", args,
                                            input_responses={APPROVAL: accept},
                                            request_state=state, allow_input_required=True)
        expect(getattr(early, "is_error", None) is True and f"Open {url.split('&exp=')[0]}"
               in text_of(early),
               f"retried before anyone decided: an error result with the link again: {text_of(early)[:90]}...")
        genuine = await browser.ask(op="open", url=url)
        expect(genuine["status"] == 200 and genuine["calls"] == 1 and genuine["forms"] > 0,
               f"signed in, the genuine link shows the call and its decision forms: {genuine}")
        query = dict(pair.split("=", 1) for pair in urlsplit(url).query.split("&"))
        flipped = "0" if query["sig"][-1] != "0" else "1"
        for what, altered in [
            ("its signature changed", url[:-1] + flipped),
            ("its exp changed", url.replace(f"&exp={query['exp']}&",
                                            f"&exp={int(query['exp']) + 86_400_000}&")),
            ("its tenant changed", url.replace("tenant=local&", "tenant=globex&")),
        ]:
            seen = await browser.ask(op="open", url=altered)
            expect(altered != url and seen["status"] == 403 and seen["forms"] == 0
                   and seen["calls"] == 0
                   and "was not issued for this call, or was altered" in (seen["error"] or ""),
                   f"the link with {what} is 403 with no decision form: {seen['error']}")
        expect(executions(notes, "cus_3") == 0, "cus_3 never ran")

        # 4. Expired: a server whose links last 1 s.
        short = await stack.enter_async_context(
            client(binary, db, notes, inbox, "--inbox-link-secs", "1", callback=opens))
        first_round = await short.session.call_tool("delete_account", {"customer_id": "cus_4"},
                                                    allow_input_required=True)
        mode, url = link_of(first_round)
        expect(mode == "url" and url, "with --inbox-link-secs 1, a fourth call gets a URL")
        time.sleep(2)  # past the link's validity
        seen = await browser.ask(op="open", url=url)
        expect(seen["status"] == 410 and seen["forms"] == 0
               and "expired" in (seen["error"] or ""),
               f"once expired, the link is 410 with no decision form: {seen['error']}")
        expect(executions(notes, "cus_4") == 0, "cus_4 never ran")


def main():
    check_mcp.ensure_mcp(__file__)  # re-runs this script in the venv holding `mcp`
    check_ui.ensure_chromium()
    modules = check_ui.ensure_playwright()
    binary = check_mcp.server_binary()
    idem, _ = check_ui.binaries()
    started = time.monotonic()
    try:
        asyncio.run(check(binary, idem, modules))
    except Failed as e:
        print(f"FAIL {e}", flush=True)
        sys.exit(1)
    except BaseExceptionGroup as group:  # a FAIL inside the MCP client's task group
        failed = group.subgroup(lambda e: isinstance(e, Failed))
        if failed is None:
            raise
        while isinstance(failed, BaseExceptionGroup):
            failed = failed.exceptions[0]
        print(f"FAIL {failed}", flush=True)
        sys.exit(1)
    print(f"an MCP client is sent to the inbox, approved and denied in headless Chromium "
          f"({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
