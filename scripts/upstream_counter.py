#!/usr/bin/env python3
"""A small MCP server, built with the official Python SDK (`mcp`), whose tools have effects a
test can count: scripts/check_proxy.py puts `idem mcp-proxy` in front of it.

Every effect appends one JSON line to the file named by COUNTER_LEDGER: the tool, the text,
the `io.idem/key` the call carried in its `_meta`, and the server's pid.

- `append` (non-idempotent: twice is two lines) answers at once.
- `slow_append` appends, writes the server's pid to COUNTER_PIDFILE, then waits an hour:
  the test kills the server meanwhile.
- `hang` never answers and has no effect.
- `lines` reads the ledger (read-only).

Usage: python upstream_counter.py [--http PORT]   (stdio unless --http)
"""

import asyncio
import json
import os
import sys

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations

LEDGER = os.environ["COUNTER_LEDGER"]
server = MCPServer("counter")


def record(tool, text, ctx):
    meta = dict(ctx.request_context.meta or {})
    line = {"tool": tool, "text": text, "key": meta.get("io.idem/key"), "pid": os.getpid()}
    with open(LEDGER, "a") as ledger:
        ledger.write(json.dumps(line) + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                         idempotent_hint=False))
def append(text: str, ctx: Context) -> str:
    """Append a line to the ledger: calling it twice appends two."""
    record("append", text, ctx)
    return f"appended {text}"


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
async def slow_append(text: str, ctx: Context) -> str:
    """Append a line to the ledger, then take an hour to answer."""
    record("slow_append", text, ctx)
    with open(os.environ["COUNTER_PIDFILE"], "w") as pidfile:
        pidfile.write(str(os.getpid()))
    await asyncio.sleep(3600)
    return f"appended {text} slowly"


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
async def hang(text: str) -> str:
    """Never answer."""
    await asyncio.sleep(3600)
    return text


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lines() -> int:
    """How many lines the ledger holds."""
    if not os.path.exists(LEDGER):
        return 0
    with open(LEDGER) as ledger:
        return sum(1 for _ in ledger)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
