#!/usr/bin/env python3
"""Check the approval inbox (`idem ui`) in a real browser: headless Chromium driven by
playwright-core (scripts/check_ui.mjs), as an operator would use it.

Installs Debian's `chromium` with apt-get if /usr/bin/chromium is missing, and
`playwright-core` (pinned below; it downloads no browser) into `target/ui-check` with npm;
builds `idem` and the agent example; then, on a fresh SQLite store under `target/ui-check`:

1. The agent example leaves two approvals for globex that expire after 1 s, then two for
   acme-corp (delete_account cus_99 and cus_77) and an Unknown send_sms.
2. `idem ui` is started on a free port with a random token and the example's signing key.
3. Without the token: GET / is 401 with the login form, a wrong token on the login form is
   401, a POST /approve without the session is 401.
4. The token on the login form opens the inbox (an HttpOnly, SameSite=Strict cookie): the
   pending table lists acme-corp's two calls with their arguments, the header counts 2.
5. Approve cus_99 and deny cus_77 with a reason by clicking their rows: the notices, and the
   store's decisions (`idem approvals show --json`).
6. The agent's retry runs cus_99 once and is refused cus_77 with the reason; run again,
   cus_99 is replayed and the provider sees no request.
7. An expired request approved from the page (its fingerprint, the page's csrf token): 409,
   and the store still says expired, undecided.
8. Forgery: a POST with the session but a wrong csrf token, or from another Origin: 403, and
   nothing changed.
9. The Unknown send_sms resolved from its row: the record is completed with that result.
10. Two more approvals (initech) ticked and approved at once while one of them is requested
   again with other arguments: that one is refused alone (still pending, its new arguments),
   the other approved; then it is denied from the batch form with a reason.
11. A grant made with `idem grants add` is listed in the inbox with its bounds, revoked from
   its row, and `idem grants list --all` says who revoked it.
12. Four eyes: a call marked as needing two approvers shows "no approval yet (0 of 2)";
   approved from its row it shows who approved and that one more is awaited; the same
   person approving again is refused (409); a second person at the command line decides it.

Screenshots go to target/ui-check/inbox.png and inbox-decided.png; with --screenshots they
are also copied to examples/screenshots/.

Usage: python3 scripts/check_ui.py [--screenshots]   (from anywhere; exits non-zero on the
first problem, with a FAIL line)
"""

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "target" / "ui-check"
CHROMIUM = Path("/usr/bin/chromium")
PLAYWRIGHT = "playwright-core"
PLAYWRIGHT_VERSION = "1.64.1"  # known to drive Debian bookworm's chromium 156
# The agent example's signing key (examples/agent.rs), so the inbox can approve its calls.
APPROVAL_KEY = "desk-2026-12:6578616d706c652d617070726f76616c2d6b65792d6e6f742d73656372657421"
WHO = "dana@support-desk"


class Failed(Exception):
    pass


def expect(ok, what):
    if not ok:
        raise Failed(what)
    print(f"ok   {what}", flush=True)


def ensure_chromium():
    if CHROMIUM.exists():
        return
    print("installing Debian's chromium with apt-get", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "chromium"]
    if subprocess.run(install, env=env).returncode != 0:
        # A fresh machine has no package lists yet.
        subprocess.run(["apt-get", "update"], env=env, check=True)
        subprocess.run(install, env=env, check=True)


def ensure_playwright():
    """The node_modules folder holding playwright-core at the pinned version."""
    modules = WORK / "node_modules"
    manifest = modules / PLAYWRIGHT / "package.json"
    if manifest.exists() and json.loads(manifest.read_text())["version"] == PLAYWRIGHT_VERSION:
        return modules
    WORK.mkdir(parents=True, exist_ok=True)
    package = {"private": True, "dependencies": {PLAYWRIGHT: PLAYWRIGHT_VERSION}}
    (WORK / "package.json").write_text(json.dumps(package, indent=2) + "\n")
    npm = ["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(WORK)]
    # playwright-core has no install script, and is told not to fetch a browser anyway.
    env = dict(os.environ, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD="1")
    subprocess.run(npm, env=env, check=True)
    return modules


def binaries():
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug"
    idem, agent = target / "idem", target / "examples" / "agent"
    # `.ci/run` has just built both with every feature (`cargo test --workspace
    # --all-features`): IDEM_CHECK_PREBUILT=1 uses that build instead of a second one.
    prebuilt = os.environ.get("IDEM_CHECK_PREBUILT") == "1" and idem.exists() and agent.exists()
    if not prebuilt:
        for cargo in (["cargo", "build", "--quiet", "-p", "idem-cli", "--bin", "idem"],
                      ["cargo", "build", "--quiet", "--example", "agent"]):
            subprocess.run(cargo, cwd=ROOT, check=True)
    return idem, agent


def run_agent(agent, db, *args):
    done = subprocess.run([str(agent), "--db", str(db), *args], capture_output=True, text=True,
                          timeout=60)
    if done.returncode != 0:
        raise Failed(f"the agent example {' '.join(args)} exited {done.returncode}: "
                     f"{done.stderr.strip()[-500:]}")
    return done.stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url, server):
    """Whether the inbox at `url` answers (401 at / without the token) within 20 s."""
    for _ in range(400):
        if server.poll() is not None:
            return False
        try:
            urllib.request.urlopen(url + "/", timeout=1).close()
            return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            time.sleep(0.05)
    return False


def stop(server):
    if server.poll() is None:
        server.send_signal(2)  # SIGINT: the inbox shuts down gracefully on ctrl-c
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def check(idem, agent, modules):
    db = WORK / "inbox.db"
    for old in WORK.glob("*.png"):
        old.unlink()

    # 1. The store: globex's approvals expire after a second; acme-corp's wait.
    out = run_agent(agent, db, "--fresh", "--leave-to-operator", "--tenant", "globex",
                    "--approval-window", "1")
    expect(out.count("waiting for a person: delete_account") == 2,
           "the agent leaves two approvals for globex, valid for 1 s")
    out = run_agent(agent, db, "--leave-to-operator")
    expect('waiting for a person: delete_account {"customer_id":"cus_99"}' in out
           and 'waiting for a person: delete_account {"customer_id":"cus_77"}' in out
           and "refused: outcome_unknown (outcome of `send_sms`" in out,
           "and two for acme-corp (cus_99, cus_77), and an Unknown send_sms")
    time.sleep(2)

    # 2. The inbox.
    token = secrets.token_hex(16)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = WORK / "ui.log"
    env = dict(os.environ, IDEM_UI_TOKEN=token, IDEM_APPROVAL_KEY=APPROVAL_KEY)
    env.pop("IDEM_APPROVER", None)
    with open(log, "w") as stderr:
        server = subprocess.Popen(
            # From the store's folder, so that the page (and its screenshots) name the file
            # as `inbox.db`, not by a path of this machine.
            [str(idem), "ui", "--store", f"sqlite:{db.name}", "--listen", f"127.0.0.1:{port}",
             "--as", WHO], env=env, stdout=stderr, stderr=stderr, cwd=db.parent)
    try:
        expect(answers(url, server), f"idem ui answers at {url}")
        browser = dict(os.environ, IDEM_UI_URL=url, IDEM_UI_TOKEN=token,
                       IDEM_UI_STORE=f"sqlite:{db}", IDEM_UI_DB=str(db),
                       IDEM_UI_BIN=str(idem), IDEM_UI_AGENT=str(agent), IDEM_UI_OUT=str(WORK),
                       IDEM_UI_MODULES=str(modules), IDEM_UI_CHROMIUM=str(CHROMIUM),
                       IDEM_UI_APPROVAL_KEY=APPROVAL_KEY)
        browser.pop("IDEM_STORE", None)
        # 3-9 in the browser; it prints its own ok and FAIL lines.
        node = subprocess.run(["node", str(ROOT / "scripts" / "check_ui.mjs")], env=browser,
                              timeout=120)
        if node.returncode != 0:
            raise Failed(f"the browser check exited {node.returncode}; the inbox's log:\n"
                         + log.read_text()[-2000:])
    finally:
        stop(server)


def main():
    screenshots = "--screenshots" in sys.argv[1:]
    ensure_chromium()
    modules = ensure_playwright()
    idem, agent = binaries()
    started = time.monotonic()
    try:
        check(idem, agent, modules)
    except Failed as e:
        print(f"FAIL {e}", flush=True)
        sys.exit(1)
    if screenshots:
        shots = ROOT / "examples" / "screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        for name in ("inbox.png", "inbox-decided.png"):
            shutil.copyfile(WORK / name, shots / name)
        print(f"copied the screenshots to {shots.relative_to(ROOT)}/")
    print(f"the approval inbox works in headless Chromium ({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
