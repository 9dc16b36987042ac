#!/usr/bin/env python3
"""Check idem's MCP server with the official Python MCP client (the `mcp` package).

Installs `mcp` (pinned below) into a virtual environment under `target/`, builds
`examples/mcp_server.rs`, starts it over stdio on a fresh SQLite file, and checks what a
real client sees: the tools listed with their annotations, a call executed, the same call
re-sent replayed with `io.idem/deduplicated`, a write without a key refused with how to pass
one, an irreversible call refused pending approval, and an unknown tool a protocol error.

Usage: python3 scripts/check_mcp.py   (from anywhere; exits non-zero on any problem)
"""

import asyncio
import os
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "target" / "mcp-venv"
PACKAGES = ["mcp==2.3.0"]
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


def main():
    ensure_mcp()
    binary = server_binary()
    with tempfile.TemporaryDirectory(prefix="idem-mcp-check-") as tmp:
        problems = asyncio.run(check(binary, str(Path(tmp) / "idem.db")))
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        sys.exit(1)
    print("the MCP server answers the official Python client as documented")


if __name__ == "__main__":
    main()
