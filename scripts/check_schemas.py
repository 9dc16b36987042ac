#!/usr/bin/env python3
"""Check idem's golden schema documents with an independent validator.

Installs the Python `jsonschema` package (with `rfc3339-validator`, so that `date-time` is
checked) into a virtual environment under `target/`, then:

1. runs `Draft202012Validator.check_schema` on every canonical schema and every exported
   document that is JSON Schema (all provider forms but Gemini's OpenAPI `parameters`);
2. validates every fixture's instances (`tests/golden/instances/*.json`, written by
   `cargo test -p idem-tests --test schema schemas`) against the canonical schema, with formats asserted, and
   checks that the verdict agrees with idem's own.

Usage: python3 scripts/check_schemas.py   (from anywhere; exits non-zero on any problem)
"""

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import venvs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
VENV = ROOT / "target" / "schema-check-venv"
PACKAGES = ["jsonschema>=4.18", "rfc3339-validator"]


def install_jsonschema():
    """The venv's python, with the validator installed."""
    return venvs.installed(VENV, PACKAGES)


def ensure_jsonschema():
    """Re-run this script inside a venv that has the packages."""
    if os.environ.get("IDEM_SCHEMA_CHECK_VENV") == "1":
        return
    try:
        python = install_jsonschema()
    except (OSError, subprocess.CalledProcessError) as e:
        # No venv module (Debian without python3-venv): install for this user instead.
        print(f"no virtual environment ({e}); installing with pip --user", file=sys.stderr)
        pip = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", *PACKAGES]
        subprocess.run([sys.executable, *pip, "--user", "--break-system-packages"], check=True)
        python = Path(sys.executable)
    env = dict(os.environ, IDEM_SCHEMA_CHECK_VENV="1")
    sys.exit(subprocess.run([str(python), __file__, *sys.argv[1:]], env=env).returncode)


def documents(provider, entry):
    """The JSON Schema documents inside one exported tools-array entry."""
    if "refused" in entry:
        return []
    if provider == "openai":
        return [("parameters", entry["function"]["parameters"])]
    if provider == "openai-responses":
        return [("parameters", entry["parameters"])]
    if provider in ("anthropic", "anthropic-strict"):
        return [("input_schema", entry["input_schema"])]
    if provider == "gemini":
        return [("parametersJsonSchema", entry["parametersJsonSchema"])] if "parametersJsonSchema" in entry else []
    if provider == "mcp":
        docs = [("inputSchema", entry["inputSchema"])]
        if "outputSchema" in entry:
            docs.append(("outputSchema", entry["outputSchema"]))
        return docs
    return []


def main():
    ensure_jsonschema()
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    checker = Draft202012Validator.FORMAT_CHECKER
    for fmt in ("date-time", "email", "uuid"):
        if fmt not in checker.checkers:
            print(f"the format checker cannot check `{fmt}`: install rfc3339-validator", file=sys.stderr)
            return 1

    problems = []
    checked = 0
    json_schema_providers = ["canonical", "openai", "openai-responses", "anthropic", "anthropic-strict", "gemini", "mcp"]
    for provider in json_schema_providers:
        folder = GOLDEN / provider
        files = sorted(folder.glob("*.json"))
        if not files:
            problems.append(f"{folder}: no golden files")
        for path in files:
            entry = json.loads(path.read_text())
            docs = [("schema", entry)] if provider == "canonical" else documents(provider, entry)
            for name, doc in docs:
                try:
                    Draft202012Validator.check_schema(doc)
                    checked += 1
                except SchemaError as e:
                    problems.append(f"{provider}/{path.name} {name}: {e.message}")

    agreed = 0
    instance_files = sorted((GOLDEN / "instances").glob("*.json"))
    if not instance_files:
        problems.append("no instances: run `cargo test -p idem-tests --test schema schemas` first")
    for path in instance_files:
        cases = json.loads(path.read_text())
        schema = json.loads((GOLDEN / "canonical" / path.name).read_text())
        validator = Draft202012Validator(schema, format_checker=checker)
        has_valid = has_invalid = False
        for case in cases["cases"]:
            errors = list(validator.iter_errors(case["validated"]))
            verdict = not errors
            has_valid |= case["valid"]
            has_invalid |= not case["valid"]
            if verdict != case["valid"]:
                why = errors[0].message if errors else "valid"
                problems.append(
                    f"instances/{path.name}: idem says {'valid' if case['valid'] else 'invalid'}, "
                    f"jsonschema says {'valid' if verdict else 'invalid'} ({why}) for {json.dumps(case['instance'])}"
                )
            else:
                agreed += 1
        if not (has_valid and has_invalid):
            problems.append(f"instances/{path.name}: needs a valid and an invalid case")

    for p in problems:
        print(p, file=sys.stderr)
    failed = len(problems)
    print(f"schemas: {checked} documents are valid JSON Schema 2020-12; {agreed} instance verdicts agree")
    print(f"{checked + agreed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
