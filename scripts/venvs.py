"""The virtual environments of the cross-checks: one per check under target/, holding its
pinned packages, created and filled on first use and left as they are once the pins are
there (pip would ask the index again on every run)."""

import subprocess
import venv
from pathlib import Path

# A pin this checks for: `name==version`; anything else (`name>=x`) is installed when the
# package is missing.
_PINNED = """
import importlib.metadata as m, sys
def ok(spec):
    name, _, version = spec.partition("==")
    name = name.split(">")[0].split("<")[0].strip()
    try:
        have = m.version(name)
    except m.PackageNotFoundError:
        return False
    return not version or have == version
sys.exit(0 if all(ok(s) for s in sys.argv[1:]) else 1)
"""


def installed(folder: Path, packages) -> Path:
    """The python of the venv at `folder`, with `packages` installed (created if missing)."""
    python = folder / "bin" / "python"
    if not python.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        venv.EnvBuilder(with_pip=True).create(folder)
    if subprocess.run([str(python), "-c", _PINNED, *packages], capture_output=True).returncode != 0:
        pip = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", *packages]
        subprocess.run([str(python), *pip], check=True)
    return python
