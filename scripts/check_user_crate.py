#!/usr/bin/env python3
"""Build and test tests/user-crate as a user's crate of its own would be: outside the
workspace, depending on the facade (`idem-tools`, feature `testing`) by path, its own tools
defined with #[tool], crash-tested with idem::testing in a #[test] (every point killed and
resumed; two planted defects caught and named: an effect sent before its step is journaled,
and a write that is not idempotent declared as one).

The crate takes the workspace's lock file (so it builds the versions the workspace tested)
and the workspace's target directory (so what both build is built once).

Usage: python3 scripts/check_user_crate.py   (exits non-zero on any problem)
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATE = ROOT / "tests" / "user-crate"


def main():
    shutil.copyfile(ROOT / "Cargo.lock", CRATE / "Cargo.lock")
    env = dict(os.environ, CARGO_TARGET_DIR=str(ROOT / "target"))
    test = ["cargo", "test", "--manifest-path", str(CRATE / "Cargo.toml"), "--", "--nocapture"]
    done = subprocess.run(test, env=env, capture_output=True, text=True)
    out = done.stdout + done.stderr
    verdicts = [line for line in out.splitlines() if "point(s)" in line or "TWICE" in line]
    for line in verdicts:
        print(line.strip())
    if done.returncode != 0:
        print(out)
        print("the user's crate failed its crash tests")
        return 1
    if not any("every point held" in line for line in out.splitlines()):
        print(out)
        print("the user's crate reported no held crash test")
        return 1
    print("a user's crate crash-tests its own tools with idem::testing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
