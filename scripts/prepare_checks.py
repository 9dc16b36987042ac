"""Install what the cross-checks need before they run: Debian's chromium, and each check's
pinned clients under target/ (the `mcp` venv, the provider SDKs' venv, the schema
validator's venv, the TypeScript SDK, server-memory, playwright-core).

`.ci/run` starts this beside the build, so that downloads overlap compiling; it waits for it
before the first check. Each check still installs what is missing on its own, so running one
check alone needs none of this."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_mcp  # noqa: E402
import check_mcp_ts  # noqa: E402
import check_providers  # noqa: E402
import check_proxy  # noqa: E402
import check_schemas  # noqa: E402
import check_ui  # noqa: E402

STEPS = [
    ("chromium", check_ui.ensure_chromium),
    ("mcp (Python)", check_mcp.install_mcp),
    ("openai, anthropic, google-genai", check_providers.install_sdks),
    ("jsonschema", check_schemas.install_jsonschema),
    ("@modelcontextprotocol/sdk", check_mcp_ts.ensure_sdk),
    ("@modelcontextprotocol/server-memory", check_proxy.memory_server),
    ("playwright-core", check_ui.ensure_playwright),
]


def main():
    failed = []
    for name, step in STEPS:
        started = time.monotonic()
        try:
            step()
        except Exception as e:  # noqa: BLE001  (the check itself reports it again, in full)
            failed.append(f"{name}: {e}")
            continue
        print(f"prepared {name} in {time.monotonic() - started:.0f} s", flush=True)
    for line in failed:
        print(f"could not prepare {line}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
