#!/usr/bin/env python3
"""Check the agent loop's provider shapes with the providers' own Python SDKs.

Installs `openai`, `anthropic` and `google-genai` (pinned below) into a virtual environment
under `target/`, then:

1. parses every fixture response (`tests/fixtures/providers/<shape>/*.json`) with the SDK's
   response model: `openai` `ChatCompletion` and `Response`, `anthropic` `Message`,
   `google-genai` `GenerateContentResponse`;
2. validates every result message idem produced for them (`tests/golden/agent/<shape>/`,
   written and checked by `cargo test -p idem-tests --features agent --test agent agent_loop`) with the SDK's
   request types: `ChatCompletionToolMessageParam`, the Responses `function_call_output`
   input item, `anthropic` `MessageParam`, `google-genai` `Content`; and checks that they
   answer the calls the SDK read in the response, in order, by id (and by name for Gemini);
3. validates every exported tools array (`tests/golden/agent/tools/`) and every exported
   entry of the schema fixtures (`tests/golden/<provider>/`, written by `cargo test --test
   schemas`) with `ChatCompletionToolParam`, Responses `FunctionToolParam`, `anthropic`
   `ToolParam` and `google-genai` `Tool`.

The SDKs' request types are TypedDicts, which pydantic lets carry unknown keys: every
TypedDict reached from the types checked is made to forbid them (`extra='forbid'`, unless
the SDK configured it otherwise, as for the open parts of a JSON Schema), and the lazily
validated iterables are consumed, so a misspelt or invented field fails. Controls with one
such field each must be refused, or the check itself is broken. google-genai's models
forbid unknown fields already.

Usage: python3 scripts/check_providers.py   (from anywhere; exits non-zero on any problem)
"""

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import venvs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "target" / "providers-venv"
PACKAGES = ["openai==3.57.0", "anthropic==2.15.0", "google-genai==3.6.1"]
FIXTURES = ROOT / "tests" / "fixtures" / "providers"
ANSWERS = ROOT / "tests" / "golden" / "agent"
EXPORTS = ROOT / "tests" / "golden"


def install_sdks():
    """The venv's python, with the SDKs at their pins."""
    return venvs.installed(VENV, PACKAGES)


def ensure_sdks():
    """Re-run this script inside a venv that has the packages."""
    if os.environ.get("IDEM_PROVIDERS_CHECK_VENV") == "1":
        return
    python = install_sdks()
    env = dict(os.environ, IDEM_PROVIDERS_CHECK_VENV="1")
    sys.exit(subprocess.run([str(python), __file__, *sys.argv[1:]], env=env).returncode)


def forbid_unknown_keys(tp, seen=None):
    """Make every TypedDict reachable from `tp` refuse keys it does not declare."""
    import typing_extensions as typing  # the SDKs' TypedDicts are typing_extensions ones

    seen = set() if seen is None else seen
    if id(tp) in seen:
        return
    seen.add(id(tp))
    if typing.is_typeddict(tp):
        if "__pydantic_config__" not in tp.__dict__:
            tp.__pydantic_config__ = {"extra": "forbid", "strict": True}
        for hint in typing.get_type_hints(tp, include_extras=True).values():
            forbid_unknown_keys(hint, seen)
        return
    for arg in typing.get_args(tp):
        forbid_unknown_keys(arg, seen)


def consume(value):
    """Walk a validated value, running the validation pydantic defers for iterables."""
    if isinstance(value, dict):
        for v in value.values():
            consume(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            consume(v)
    elif not isinstance(value, (str, bytes, int, float, bool, type(None))) and hasattr(value, "__iter__"):
        for v in list(value):
            consume(v)


class Strict:
    """A TypeAdapter over an SDK request type that refuses unknown keys at any depth."""

    def __init__(self, tp):
        from pydantic import TypeAdapter

        forbid_unknown_keys(tp)
        self.adapter = TypeAdapter(tp)

    def __call__(self, value):
        consume(self.adapter.validate_python(value))


def main():
    ensure_sdks()
    from anthropic.types import Message, MessageParam, ToolParam
    from google.genai import types as genai
    from openai.types.chat import ChatCompletion, ChatCompletionToolMessageParam, ChatCompletionToolParam
    from openai.types.responses import FunctionToolParam, Response
    from openai.types.responses.response_input_item_param import FunctionCallOutput

    problems = []

    def expect(ok, what, detail=""):
        print(("ok   " if ok else "FAIL ") + what + ("" if ok or not detail else f": {detail}"))
        if not ok:
            problems.append(what)

    def check(validate, value, what):
        try:
            validate(value)
            expect(True, what)
        except Exception as e:  # pydantic's ValidationError, or anything the SDK raises
            expect(False, what, str(e).replace("\n", " ")[:600])

    def refused(validate, value, what):
        try:
            validate(value)
            expect(False, f"control refused: {what}", "accepted")
        except Exception:
            expect(True, f"control refused: {what}")

    def genai_content(value):
        genai.Content.model_validate(value)

    def genai_tool(value):
        genai.Tool.model_validate(value)

    # The calls the SDK reads in each response: (id, name) in order.
    def chat_calls(value):
        return [(c.id, c.function.name) for c in ChatCompletion.model_validate(value).choices[0].message.tool_calls or []]

    def responses_calls(value):
        return [(o.call_id, o.name) for o in Response.model_validate(value).output if o.type == "function_call"]

    def anthropic_calls(value):
        return [(b.id, b.name) for b in Message.model_validate(value).content if b.type == "tool_use"]

    def gemini_calls(value):
        return [(c.id, c.name) for c in genai.GenerateContentResponse.model_validate(value).function_calls or []]

    tool_message = Strict(ChatCompletionToolMessageParam)
    call_output = Strict(FunctionCallOutput)
    message_param = Strict(MessageParam)

    def chat_answers(messages):
        for m in messages:
            tool_message(m)
        return [(m["tool_call_id"], None) for m in messages]

    def responses_answers(messages):
        for m in messages:
            call_output(m)
        return [(m["call_id"], None) for m in messages]

    def anthropic_answers(messages):
        assert len(messages) == 1 and messages[0]["role"] == "user", "one user message"
        message_param(messages[0])
        return [(b["tool_use_id"], None) for b in messages[0]["content"]]

    def gemini_answers(messages):
        assert len(messages) == 1 and messages[0]["role"] == "user", "one user content"
        content = genai.Content.model_validate(messages[0])
        return [(p.function_response.id, p.function_response.name) for p in content.parts]

    shapes = {
        "openai-chat": (chat_calls, chat_answers, False),
        "openai-responses": (responses_calls, responses_answers, False),
        "anthropic": (anthropic_calls, anthropic_answers, False),
        "gemini": (gemini_calls, gemini_answers, True),
    }

    answered = 0
    for shape, (calls_of, answers_of, by_name) in shapes.items():
        files = sorted((FIXTURES / shape).glob("*.json"))
        expect(len(files) >= 2, f"{shape}: {len(files)} fixtures")
        for path in files:
            label = f"{shape}/{path.name}"
            response = json.loads(path.read_text())
            try:
                calls = calls_of(response)
                expect(len(calls) > 0, f"{label}: the SDK parses the response ({len(calls)} tool calls)")
            except Exception as e:
                expect(False, f"{label}: the SDK parses the response", str(e).replace("\n", " ")[:600])
                continue
            golden = ANSWERS / shape / path.name
            if not golden.exists():
                expect(False, f"{label}: idem's answer", f"{golden.relative_to(ROOT)} is missing: run cargo test -p idem-tests --features agent --test agent agent_loop")
                continue
            messages = json.loads(golden.read_text())["messages"]
            try:
                answers = answers_of(messages)
            except Exception as e:
                expect(False, f"{label}: idem's answer validates as the SDK's request type", str(e).replace("\n", " ")[:600])
                continue
            expect(True, f"{label}: idem's answer validates as the SDK's request type ({len(messages)} messages)")
            wanted = [(i, n if by_name else None) for i, n in calls]
            expect(answers == wanted, f"{label}: one answer per call, in order, matched by id" + (" and name" if by_name else ""),
                   f"{answers} != {wanted}")
            answered += 1
    expect(answered >= 9, f"{answered} fixture responses answered")

    # Controls: one unknown or mistyped field each must be refused.
    refused(tool_message, {"role": "tool", "tool_call_id": "call_1", "content": "{}", "name": "get_weather"}, "a tool message with `name`")
    refused(call_output, {"type": "function_call_output", "call_id": "call_1", "output": "{}", "content": "{}"}, "a function_call_output with `content`")
    refused(message_param, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "{}", "error": True}]}, "a tool_result with `error`")
    refused(message_param, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": "yes"}]}, "a tool_result whose `is_error` is text")
    refused(genai_content, {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}, "result": 1}}]}, "a functionResponse with `result`")

    # The tools arrays of the fixtures' registry, whole.
    chat_tool, responses_tool, anthropic_tool = Strict(ChatCompletionToolParam), Strict(FunctionToolParam), Strict(ToolParam)
    arrays = {
        "openai": lambda tools: [chat_tool(t) for t in tools],
        "openai-responses": lambda tools: [responses_tool(t) for t in tools],
        "anthropic": lambda tools: [anthropic_tool(t) for t in tools],
        "anthropic-strict": lambda tools: [anthropic_tool(t) for t in tools],
        "gemini": lambda tools: genai_tool({"functionDeclarations": tools}),
        "gemini-openapi": lambda tools: genai_tool({"functionDeclarations": tools}),
    }
    for provider, validate in arrays.items():
        path = ANSWERS / "tools" / f"{provider}.json"
        if not path.exists():
            expect(False, f"tools array for {provider}", f"{path.relative_to(ROOT)} is missing")
            continue
        tools = json.loads(path.read_text())
        check(validate, tools, f"tools array for {provider} ({len(tools)} tools) validates as the SDK's tool type")
    refused(chat_tool, {"type": "function", "function": {"name": "f", "parameters": {}, "strictly": True}}, "a Chat tool with `strictly`")
    refused(responses_tool, {"type": "function", "name": "f", "parameters": {}, "strict": True, "function": {}}, "a Responses tool with `function`")
    refused(anthropic_tool, {"name": "f", "input_schema": {"type": "object"}, "parameters": {}}, "an Anthropic tool with `parameters`")
    refused(genai_tool, {"functionDeclarations": [{"name": "f", "parameters": {"type": "INTEGER", "exclusiveMinimum": 0}}]}, "a Gemini OpenAPI schema with `exclusiveMinimum`")

    # Every exported entry of the schema fixtures.
    entries = {"openai": chat_tool, "openai-responses": responses_tool, "anthropic": anthropic_tool,
               "anthropic-strict": anthropic_tool, "gemini": lambda t: genai_tool({"functionDeclarations": [t]}),
               "gemini-openapi": lambda t: genai_tool({"functionDeclarations": [t]})}
    for provider, validate in entries.items():
        files = sorted((EXPORTS / provider).glob("*.json"))
        bad = []
        checked = 0
        for path in files:
            entry = json.loads(path.read_text())
            if "refused" in entry:
                continue
            checked += 1
            try:
                validate(entry)
            except Exception as e:
                bad.append(f"{path.name}: {str(e).splitlines()[0:3]}")
        expect(not bad and checked > 0, f"{checked} exported {provider} entries validate as the SDK's tool type", "; ".join(bad))

    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
