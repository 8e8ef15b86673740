"""Validates the wire shapes toolgate produces with the providers' own SDK types.

Usage: validate_wire.py SHAPES.json — the file holds, per format, the conversation toolgate keeps
(assistant messages and tool results it wrote) and the full request body its adapter sends. Each
is validated with pydantic TypeAdapters over the SDKs' TypedDicts and models. TypedDict list fields
validate lazily, so every validated value is walked to the end. Exits 1 with the first error of
each failing shape.
"""

import json
import sys

from pydantic import TypeAdapter


def walk(value):
    """Iterates every nested iterable so lazy list validators run (and raise)."""
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return
    if isinstance(value, dict):
        for v in value.values():
            walk(v)
        return
    if hasattr(value, "model_dump"):
        walk(value.model_dump())
        return
    try:
        items = iter(value)
    except TypeError:
        return
    for v in items:
        walk(v)


def check(name, adapter, data, failures):
    try:
        walk(adapter.validate_python(data))
    except Exception as e:  # pydantic's ValidationError, or a lazy validator's
        failures.append(f"{name}: {str(e)[:1500]}")


# Keys the providers' API references require, where an SDK TypedDict does not mark them Required.
REQUIRED = {
    "function_call": ("call_id", "name", "arguments"),
    "function_call_output": ("call_id", "output"),
    "tool_use": ("id", "name", "input"),
    "tool_result": ("tool_use_id",),
    "tool": ("tool_call_id", "content"),
}


def check_each(name, items, key, types, failures):
    """Unions of TypedDicts with optional keys accept almost anything: each item is also
    validated against the one type its `role` or `type` names."""
    for i, item in enumerate(items):
        kind = item.get(key) if isinstance(item, dict) else None
        typ = types.get(kind)
        if typ is None:
            failures.append(f"{name}[{i}]: unexpected {key} {kind!r}")
            continue
        check(f"{name}[{i}] as {typ.__name__}", TypeAdapter(typ), item, failures)
        missing = [k for k in REQUIRED.get(kind, ()) if k not in item]
        if missing:
            failures.append(f"{name}[{i}] ({kind}): missing {missing}")


def main():
    shapes = json.load(open(sys.argv[1]))
    failures = []

    from openai.types.chat import ChatCompletionMessageParam
    from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming
    from openai.types.responses import ResponseInputParam
    from openai.types.responses.response_create_params import ResponseCreateParamsStreaming
    from anthropic.types import MessageParam
    from anthropic.types.message_create_params import MessageCreateParamsStreaming
    from google.genai import types as genai

    from openai.types.chat import (
        ChatCompletionAssistantMessageParam,
        ChatCompletionSystemMessageParam,
        ChatCompletionToolMessageParam,
        ChatCompletionUserMessageParam,
    )
    from openai.types.responses import EasyInputMessageParam, ResponseFunctionToolCallParam
    from openai.types.responses.response_input_param import FunctionCallOutput
    from openai.types.responses import ResponseOutputMessageParam
    from anthropic.types import TextBlockParam, ToolResultBlockParam, ToolUseBlockParam

    chat_messages = TypeAdapter(list[ChatCompletionMessageParam])
    chat_roles = {
        "system": ChatCompletionSystemMessageParam,
        "user": ChatCompletionUserMessageParam,
        "assistant": ChatCompletionAssistantMessageParam,
        "tool": ChatCompletionToolMessageParam,
    }
    for fmt in ("openai", "text"):
        s = shapes[fmt]
        check(f"{fmt} conversation", chat_messages, s["messages"], failures)
        check_each(f"{fmt} message", s["messages"], "role", chat_roles, failures)
        check(f"{fmt} request", TypeAdapter(CompletionCreateParamsStreaming), s["request"], failures)

    s = shapes["responses"]
    check("responses conversation", TypeAdapter(ResponseInputParam), s["messages"], failures)
    items = {
        "function_call": ResponseFunctionToolCallParam,
        "function_call_output": FunctionCallOutput,
    }
    for i, item in enumerate(s["messages"]):
        if item.get("type") == "message" or "role" in item:
            typ = ResponseOutputMessageParam if item.get("role") == "assistant" else EasyInputMessageParam
            check(f"responses item[{i}] as {typ.__name__}", TypeAdapter(typ), item, failures)
        else:
            check_each("responses item", [item], "type", items, failures)
    check("responses request", TypeAdapter(ResponseCreateParamsStreaming), s["request"], failures)

    s = shapes["anthropic"]
    check("anthropic conversation", TypeAdapter(list[MessageParam]), s["messages"], failures)
    blocks = {"text": TextBlockParam, "tool_use": ToolUseBlockParam, "tool_result": ToolResultBlockParam}
    for i, message in enumerate(s["messages"]):
        if isinstance(message.get("content"), list):
            check_each(f"anthropic message[{i}] block", message["content"], "type", blocks, failures)
    check("anthropic request", TypeAdapter(MessageCreateParamsStreaming), s["request"], failures)

    # google-genai's models forbid unknown keys: an invented field fails here.
    s = shapes["gemini"]
    check("gemini conversation", TypeAdapter(list[genai.Content]), s["messages"], failures)
    request = s["request"]
    check("gemini request contents", TypeAdapter(list[genai.Content]), request["contents"], failures)
    check("gemini request tools", TypeAdapter(list[genai.Tool]), request.get("tools", []), failures)
    if "systemInstruction" in request:
        check("gemini request systemInstruction", TypeAdapter(genai.Content), request["systemInstruction"], failures)
    unknown = set(request) - {"contents", "tools", "systemInstruction", "generationConfig", "toolConfig"}
    if unknown:
        failures.append(f"gemini request: unknown top-level fields {sorted(unknown)}")

    counted = {k: len(v["messages"]) for k, v in shapes.items()}
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"valid: {counted}")


if __name__ == "__main__":
    main()
