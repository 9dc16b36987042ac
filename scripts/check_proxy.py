#!/usr/bin/env python3
"""Check `idem mcp-proxy` in front of real MCP servers, with the official Python MCP client.

Installs `mcp` (pinned below) into a virtual environment under `target/` and the reference
`@modelcontextprotocol/server-memory` (pinned below) into `target/mcp-node` with npm, builds
the `idem` binary, and checks:

a. `init` against server-memory lists its tools, each class suggested and marked for review;
   a proxy with every tool unreviewed refuses to start, and one with some tools reviewed
   serves those only and says at start-up which it does not serve, and why.
b. The same `create_entities` call twice with one key through the proxy: the second is a
   replay (`io.idem/deduplicated`) with the first's result, and the memory file holds the
   entity once. The bare upstream, asked the same again, answers `[]` (the entity exists):
   so the replay's answer did not come from the upstream.
   A client that sends no `_meta`, as the hosts people use: `create_entities` runs through
   the re-send window (on by default) and its re-issue (a new request id) is replayed with the
   first's result (server-memory itself would answer `[]` for an entity that exists); the
   graph read through the proxy holds the entity once.
c. An upstream built with the Python SDK (scripts/upstream_counter.py), each effect a line
   in a ledger: `append` twice with one key is one line, and the line carries the downstream
   key the proxy passed in `_meta`; `append` twice without `_meta` is one line too (the
   re-send window), and other arguments another line; an upstream killed during
   `slow_append` gives an `outcome_unknown` error result, the same call again does not run
   it again (still one line), and a new key runs on the upstream the proxy started again.
d. The proxy restarted on the same SQLite file: the completed call replays without reaching
   the upstream, and the unknown one is still unknown.
e. An upstream that hangs past `timeout_secs`: a clear error result, and the proxy serves on.
f. Both sides over Streamable HTTP: the upstream at a URL, the proxy serving at one.

Usage: python3 scripts/check_proxy.py   (from anywhere; exits non-zero on any problem)
"""

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_mcp import ensure_mcp  # noqa: E402  (one venv and pin for both checks)

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "target" / "mcp-node"
MEMORY_SERVER = "@modelcontextprotocol/server-memory"
MEMORY_VERSION = "2026.8.31"
KEY = "io.idem/idempotency-key"
COUNTER = ROOT / "scripts" / "upstream_counter.py"

problems = []


def expect(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        problems.append(what)


def memory_server():
    """The command of server-memory, installed at the pinned version."""
    package = NODE / "node_modules" / MEMORY_SERVER
    manifest = package / "package.json"
    if not manifest.exists() or json.loads(manifest.read_text())["version"] != MEMORY_VERSION:
        NODE.mkdir(parents=True, exist_ok=True)
        npm = ["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(NODE),
               f"{MEMORY_SERVER}@{MEMORY_VERSION}"]
        subprocess.run(npm, check=True)
    return ["node", str(package / "dist" / "index.js")]


def proxy_binary():
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    binary = target / "debug" / "idem"
    # `.ci/run` has just built the binary with every feature (`cargo test --workspace
    # --all-features`): IDEM_CHECK_PREBUILT=1 uses that build instead of a second one.
    if not (os.environ.get("IDEM_CHECK_PREBUILT") == "1" and binary.exists()):
        cargo = ["cargo", "build", "--quiet", "-p", "idem-cli", "--bin", "idem"]
        subprocess.run(cargo, cwd=ROOT, check=True)
    return str(binary)


def text_of(result):
    return " ".join(getattr(block, "text", "") for block in result.content)


def meta_of(result):
    return result.meta or {}


def deduplicated(result):
    return meta_of(result).get("io.idem/deduplicated")


def ledger_lines(path, text=None):
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [line for line in lines if text is None or line["text"] == text]


def review(config, tools, drop=()):
    """The configuration with `tools` reviewed (their `unreviewed = true` deleted) and the
    tables of `drop` removed."""
    tables = re.split(r"(?m)^(?=\[tools\.)", config)
    kept = []
    for table in tables:
        name = re.match(r"\[tools\.([^\]]+)\]", table)
        name = name.group(1) if name else None
        if name in drop:
            continue
        if name in tools:
            table = table.replace("unreviewed = true\n", "")
        kept.append(table)
    return "".join(kept)


class Proxy:
    """`idem mcp-proxy` started by the client over stdio, its stderr in a log file."""

    def __init__(self, binary, config, store, upstream, log, env=None):
        self.command = [binary, "mcp-proxy", "--config", str(config), "--store", str(store),
                        "--", *upstream]
        self.log = log
        self.env = dict(os.environ, **(env or {}))

    def client(self):
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(command=self.command[0], args=self.command[1:],
                                       env=self.env)
        return Client(stdio_client(params, errlog=open(self.log, "a")))

    def logged(self):
        return self.log.read_text() if self.log.exists() else ""


def upstream_client(command, env):
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=command[0], args=command[1:],
                                   env=dict(os.environ, **env))
    return Client(stdio_client(params, errlog=open(os.devnull, "w")))


async def check_memory(binary, tmp):
    memory = memory_server()
    memory_file = tmp / "memory.jsonl"
    env = {"MEMORY_FILE_PATH": str(memory_file)}
    config = tmp / "memory.toml"
    init = subprocess.run([binary, "mcp-proxy", "init", "--output", str(config), "--", *memory],
                          env=dict(os.environ, **env), capture_output=True, text=True, timeout=60)
    expect(init.returncode == 0, f"init against server-memory succeeds ({init.stderr.strip()[-200:]})")
    text = config.read_text()
    tables = re.findall(r"(?m)^\[tools\.([^\]]+)\]", text)
    expect({"create_entities", "read_graph", "delete_entities", "open_nodes"} <= set(tables),
           f"init lists every tool of server-memory: {tables}")
    expect(text.count("# REVIEW: suggested from the upstream's annotations, which are untrusted")
           == len(tables) and len(re.findall(r"(?m)^unreviewed = true$", text)) == len(tables),
           "each tool's class is marked as a suggestion to review")
    create = text.split("[tools.create_entities]")[1].split("[tools.")[0]
    expect('class = "non_idempotent_write"' in create,
           "create_entities (not idempotent, not destructive) is suggested non_idempotent_write")
    graph = text.split("[tools.read_graph]")[1].split("[tools.")[0]
    expect('class = "read"' in graph, "read_graph (read-only) is suggested read")
    again = subprocess.run([binary, "mcp-proxy", "init", "--output", str(config), "--", *memory],
                           env=dict(os.environ, **env), capture_output=True, text=True, timeout=60)
    expect(again.returncode != 0 and "exists" in again.stderr,
           "init never writes over a configuration")

    store = tmp / "memory-proxy.db"
    refused = subprocess.run([binary, "mcp-proxy", "--config", str(config), "--store", str(store),
                              "--", *memory], env=dict(os.environ, **env), capture_output=True,
                             text=True, timeout=60, stdin=subprocess.DEVNULL)
    expect(refused.returncode != 0 and "no upstream tool can be served" in refused.stderr
           and "create_entities" in refused.stderr and "not reviewed" in refused.stderr,
           "a proxy with every tool unreviewed refuses to start, naming them")

    config.write_text(review(text, {"create_entities", "read_graph"}, drop={"open_nodes"}))
    log = tmp / "memory-proxy.log"
    proxy = Proxy(binary, config, store, memory, log, env)
    entities = [{"name": "Ada", "entityType": "person", "observations": ["wrote a program"]}]
    async with proxy.client() as client:
        names = sorted(t.name for t in (await client.list_tools()).tools)
        expect(names == ["create_entities", "read_graph"],
               f"only the reviewed tools are served: {names}")
        logged = proxy.logged()
        expect("`open_nodes` is not served: the configuration does not classify it" in logged,
               "the start-up log names a tool the configuration does not classify")
        expect("`delete_entities` is not served: its class (`idempotent_write`" in logged
               and "not reviewed" in logged, "and a tool whose class is not reviewed")

        first = await client.call_tool("create_entities", {"entities": entities},
                                       meta={KEY: "memory-1"})
        expect(first.is_error is not True and meta_of(first).get("io.idem/deduplicated") is False,
               f"create_entities runs through the proxy ({text_of(first)[:120]})")
        created = (first.structured_content or {}).get("entities", [])
        expect([e.get("name") for e in created] == ["Ada"], "and creates Ada")
        replay = await client.call_tool("create_entities", {"entities": entities},
                                        meta={KEY: "memory-1"})
        expect(meta_of(replay).get("io.idem/deduplicated") is True,
               "the same call with the same key is a replay (io.idem/deduplicated)")
        expect(replay.structured_content == first.structured_content,
               "with the first call's result")
        graph = await client.call_tool("read_graph", {})
        people = [e for e in (graph.structured_content or {}).get("entities", [])
                  if e.get("name") == "Ada"]
        expect(len(people) == 1 and people[0].get("observations") == ["wrote a program"],
               "read_graph through the proxy: Ada once, with one observation")
        # A client that sends no key: the re-send window keys the call.
        grace = [{"name": "Grace", "entityType": "person", "observations": ["wrote a compiler"]}]
        unkeyed = await client.call_tool("create_entities", {"entities": grace})
        made = (unkeyed.structured_content or {}).get("entities", [])
        expect(unkeyed.is_error is not True and deduplicated(unkeyed) is False
               and [e.get("name") for e in made] == ["Grace"],
               f"no _meta: create_entities runs through the proxy ({text_of(unkeyed)[:100]})")
        reissued = await client.call_tool("create_entities", {"entities": grace})
        # Sent to server-memory again, it would answer `[]` (Grace exists), not deduplicated.
        expect(deduplicated(reissued) is True
               and reissued.structured_content == unkeyed.structured_content,
               "its re-issue is a replay of the first, with its result "
               f"({text_of(reissued)[:100]})")
        graph = await client.call_tool("read_graph", {})
        named = [e for e in (graph.structured_content or {}).get("entities", [])
                 if e.get("name") == "Grace"]
        expect(len(named) == 1, "read_graph through the proxy: Grace once")
    stored = [json.loads(line) for line in memory_file.read_text().splitlines() if line.strip()]
    expect(len([e for e in stored if e.get("name") == "Ada"]) == 1,
           "the upstream's memory file holds Ada once")
    async with upstream_client(memory, env) as bare:
        direct = await bare.call_tool("create_entities", {"entities": entities})
        expect((direct.structured_content or {}).get("entities") == [],
               "the bare upstream asked again answers [] (so the replay did not come from it)")


def counter_config(namespace):
    """The proxy's configuration in front of the counter upstream, under `namespace`."""
    return f"""
namespace = "{namespace}"

[upstream]
timeout_secs = 30

[tools.append]
class = "non_idempotent_write"

[tools.slow_append]
class = "non_idempotent_write"

[tools.hang]
class = "non_idempotent_write"
timeout_secs = 2

[tools.lines]
class = "read"
"""


async def check_counter(binary, tmp):
    ledger = tmp / "ledger.jsonl"
    pidfile = tmp / "counter.pid"
    env = {"COUNTER_LEDGER": str(ledger), "COUNTER_PIDFILE": str(pidfile)}
    upstream = [sys.executable, str(COUNTER)]
    config = tmp / "counter.toml"
    config.write_text(counter_config("counter"))
    store = tmp / "counter-proxy.db"
    log = tmp / "counter-proxy.log"
    proxy = Proxy(binary, config, store, upstream, log, env)
    async with proxy.client() as client:
        first = await client.call_tool("append", {"text": "one"}, meta={KEY: "counter-1"})
        again = await client.call_tool("append", {"text": "one"}, meta={KEY: "counter-1"})
        expect(first.is_error is not True and meta_of(again).get("io.idem/deduplicated") is True
               and again.structured_content == first.structured_content,
               "append twice with one key: the second is a replay of the first")
        lines = ledger_lines(ledger, "one")
        expect(len(lines) == 1, f"and the upstream appended one line ({len(lines)})")
        expect(len(lines) == 1 and lines[0]["key"] == meta_of(first).get("io.idem/key"),
               "the upstream got the downstream key in _meta io.idem/key")

        # A client that sends no _meta: the re-send window (on by default) keys the call.
        bare = await client.call_tool("append", {"text": "no key"})
        reissued = await client.call_tool("append", {"text": "no key"})
        expect(bare.is_error is not True and deduplicated(bare) is False
               and deduplicated(reissued) is True
               and reissued.structured_content == bare.structured_content,
               f"append twice without _meta: the re-issue is a replay ({text_of(bare)[:60]})")
        expect(len(ledger_lines(ledger, "no key")) == 1,
               f"and the upstream appended one line ({len(ledger_lines(ledger, 'no key'))})")
        other = await client.call_tool("append", {"text": "no key, other"})
        expect(deduplicated(other) is False and len(ledger_lines(ledger, "no key, other")) == 1,
               "other arguments without _meta: another call, another line")

        call = asyncio.create_task(
            client.call_tool("slow_append", {"text": "two"}, meta={KEY: "counter-2"}))
        for _ in range(300):
            if pidfile.exists() and pidfile.read_text():
                break
            await asyncio.sleep(0.05)
        killed = int(pidfile.read_text())
        os.kill(killed, signal.SIGKILL)
        lost = await asyncio.wait_for(call, 30)
        expect(lost.is_error is True
               and meta_of(lost).get("io.idem/error") == "outcome_unknown",
               f"upstream killed mid-call: an outcome_unknown error result ({text_of(lost)[:160]})")
        retry = await client.call_tool("slow_append", {"text": "two"}, meta={KEY: "counter-2"})
        expect(retry.is_error is True and meta_of(retry).get("io.idem/error") == "outcome_unknown",
               "the same call again is still unknown")
        expect(len(ledger_lines(ledger, "two")) == 1, "and was not run again (one line)")

        fresh = await client.call_tool("append", {"text": "three"}, meta={KEY: "counter-3"})
        three = ledger_lines(ledger, "three")
        expect(fresh.is_error is not True and len(three) == 1 and three[0]["pid"] != killed,
               "a new key runs on the upstream started again")
        expect("has gone away: starting it again" in proxy.logged(),
               "the proxy's log says it started the upstream again")

        started = time.monotonic()
        hung = await client.call_tool("hang", {"text": "x"}, meta={KEY: "counter-4"})
        waited = time.monotonic() - started
        expect(hung.is_error is True and "did not answer `hang` within 2 s" in text_of(hung),
               f"an upstream hanging past timeout_secs: a clear error ({text_of(hung)[:160]})")
        expect(waited < 20, f"given after the timeout ({waited:.1f} s)")
        after = await client.call_tool("append", {"text": "four"}, meta={KEY: "counter-5"})
        expect(after.is_error is not True and len(ledger_lines(ledger, "four")) == 1,
               "and the proxy serves on")
        count = await client.call_tool("lines", {})
        expect(count.is_error is not True, f"a read is served ({text_of(count)})")

    # d. A new proxy process on the same store.
    before = len(ledger_lines(ledger))
    async with proxy.client() as client:
        replay = await client.call_tool("append", {"text": "one"}, meta={KEY: "counter-1"})
        expect(meta_of(replay).get("io.idem/deduplicated") is True
               and replay.structured_content == first.structured_content,
               "after a restart of the proxy, a completed call replays from its store")
        unknown = await client.call_tool("slow_append", {"text": "two"}, meta={KEY: "counter-2"})
        expect(meta_of(unknown).get("io.idem/error") == "outcome_unknown",
               "and an unknown one is still unknown")
    expect(len(ledger_lines(ledger)) == before, "without reaching the upstream")


async def check_memory_store(binary, tmp):
    """`--store memory`: a re-send is answered once while the proxy runs; a new proxy process
    remembers nothing, so the same call reaches the upstream again (what the guide says)."""
    ledger = tmp / "memory-ledger.jsonl"
    env = {"COUNTER_LEDGER": str(ledger), "COUNTER_PIDFILE": str(tmp / "memory.pid")}
    config = tmp / "memory-store.toml"
    config.write_text(counter_config("memory-store"))
    proxy = Proxy(binary, config, "memory", [sys.executable, str(COUNTER)], tmp / "memory-store.log", env)
    async with proxy.client() as client:
        first = await client.call_tool("append", {"text": "m"}, meta={KEY: "memory-1"})
        again = await client.call_tool("append", {"text": "m"}, meta={KEY: "memory-1"})
        expect(deduplicated(first) is False and deduplicated(again) is True
               and len(ledger_lines(ledger, "m")) == 1,
               "--store memory: the same key twice reaches the upstream once")
    async with proxy.client() as client:
        after = await client.call_tool("append", {"text": "m"}, meta={KEY: "memory-1"})
        expect(deduplicated(after) is False and len(ledger_lines(ledger, "m")) == 2,
               "and a new proxy process on `memory` has forgotten it: the call runs again")
    expect("records in a store in this process's memory" in proxy.logged(),
           "the proxy's log says where its records are")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, process):
    for _ in range(400):
        if process.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


async def check_http(binary, tmp):
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    ledger = tmp / "http-ledger.jsonl"
    env = dict(os.environ, COUNTER_LEDGER=str(ledger), COUNTER_PIDFILE=str(tmp / "http.pid"))
    config = tmp / "http.toml"
    config.write_text('[tools.append]\nclass = "non_idempotent_write"\n')
    upstream_port, proxy_port = free_port(), free_port()
    upstream = subprocess.Popen([sys.executable, str(COUNTER), "--http", str(upstream_port)],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proxy = None
    try:
        expect(wait_for_port(upstream_port, upstream), "the Python upstream serves over HTTP")
        proxy = subprocess.Popen(
            [binary, "mcp-proxy", "--config", str(config), "--store", str(tmp / "http.db"),
             "--http", f"127.0.0.1:{proxy_port}",
             "--upstream-url", f"http://127.0.0.1:{upstream_port}/mcp"],
            env=env, stderr=open(tmp / "http-proxy.log", "w"))
        expect(wait_for_port(proxy_port, proxy), "the proxy serves over HTTP")
        async with Client(streamable_http_client(f"http://127.0.0.1:{proxy_port}/mcp")) as client:
            first = await client.call_tool("append", {"text": "h"}, meta={KEY: "http-1"})
            again = await client.call_tool("append", {"text": "h"}, meta={KEY: "http-1"})
            expect(first.is_error is not True
                   and meta_of(again).get("io.idem/deduplicated") is True,
                   f"over HTTP both ways, a re-sent call is replayed ({text_of(first)[:100]})")
        expect(len(ledger_lines(ledger, "h")) == 1, "and the HTTP upstream appended one line")
    finally:
        for process in (proxy, upstream):
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()


def main():
    ensure_mcp(__file__)
    binary = proxy_binary()
    with tempfile.TemporaryDirectory(prefix="idem-proxy-check-") as tmp:
        tmp = Path(tmp)
        for check in (check_memory, check_counter, check_memory_store, check_http):
            try:
                asyncio.run(check(binary, tmp))
            except Exception as e:  # a check that cannot go on is one problem, not a crash
                expect(False, f"{check.__name__} did not complete: {type(e).__name__}: {e}")
                for log in sorted(tmp.glob("*.log")):
                    print(f"--- {log.name}\n{log.read_text()[-2000:]}", file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        sys.exit(1)
    print("idem mcp-proxy keeps calls exactly-once in front of real MCP servers")


if __name__ == "__main__":
    main()
