#!/usr/bin/env python3
"""Check idem's MCP server with the official TypeScript SDK's client, sending no `_meta`.

Installs `@modelcontextprotocol/sdk` (pinned below) into `target/mcp-ts` with npm, builds
`examples/mcp_server.rs` (or, with IDEM_CHECK_PREBUILT=1, uses the build `cargo test` left),
and runs scripts/check_mcp_ts.mjs with Node, which checks, counting `add_note`'s executions in
its notebook:

- Over stdio: a write sent twice (two request ids, no key) runs once, the second result's
  `_meta["io.idem/deduplicated"] === true` with the first's output; `idem_run_account` then
  tells the session's calls: applied, replayed.
- Keys under the `_meta` names third-party MCP code uses
  (`io.modelcontextprotocol/idempotencyKey`, `idempotencyKey`): a call and its re-send run
  once, the same key with other arguments is refused as reused (the key was read, not the
  re-send window), two names giving two keys are a protocol error naming both.
- `--model-key add_note`: the tool lists an optional `idempotency_key`; two calls with one id
  are one execution, a new id a new one, an empty id an error result that runs nothing.
- Over Streamable HTTP (the SDK's sessions, `Mcp-Session-Id`): a write re-issued on its
  session runs once; a slow call whose response stream is cut before the client reads it
  (the client's fetch aborted, no resumption) and re-issued on the same session gets the
  first call's result, deduplicated, with one execution; another session inside the window
  is another call (two executions).

Usage: python3 scripts/check_mcp_ts.py   (from anywhere; exits non-zero on any problem)
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_mcp import server_binary  # noqa: E402  (one way to find or build the example)

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "target" / "mcp-ts"
SDK = "@modelcontextprotocol/sdk"
SDK_VERSION = "1.32.2"


def ensure_sdk():
    """The node_modules folder holding the SDK at the pinned version."""
    modules = WORK / "node_modules"
    manifest = modules / SDK / "package.json"
    if manifest.exists() and json.loads(manifest.read_text())["version"] == SDK_VERSION:
        return modules
    WORK.mkdir(parents=True, exist_ok=True)
    package = {"private": True, "dependencies": {SDK: SDK_VERSION}}
    (WORK / "package.json").write_text(json.dumps(package, indent=2) + "\n")
    npm = ["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(WORK)]
    subprocess.run(npm, check=True)
    return modules


def main():
    modules = ensure_sdk()
    binary = server_binary()
    with tempfile.TemporaryDirectory(prefix="idem-mcp-ts-check-") as tmp:
        env = dict(os.environ, IDEM_TS_MODULES=str(modules), IDEM_TS_SERVER=binary,
                   IDEM_TS_TMP=tmp)
        node = subprocess.run(["node", str(ROOT / "scripts" / "check_mcp_ts.mjs")], env=env,
                              timeout=300)
    if node.returncode != 0:
        print(f"the TypeScript client's check exited {node.returncode}", file=sys.stderr)
        sys.exit(1)
    print("the MCP server answers the official TypeScript client as documented")


if __name__ == "__main__":
    main()
