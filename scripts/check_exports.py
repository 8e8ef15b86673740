#!/usr/bin/env python3
"""Checks tool schemas as `toolgate tools --format F` exports them, for the provider that reads
them: with the provider SDK's own types, and with the rules the provider's documentation states
that the types do not check.

    check_exports.py FORMAT FILE        FORMAT: openai, responses, anthropic or gemini

Prints one JSON object: `tools` (how many were checked), `strict` (how many claim OpenAI strict
mode), and `failures` (the first 50, each naming the tool and the rule; `failed` counts them all).

The documented rules, written here from the providers' documentation, independently of toolgate:
- every provider: a tool name of 1 to 64 characters from `a-zA-Z0-9_-` (Gemini also allows `.`
  and `:` and needs a letter or `_` first), unique within the export; the parameters are a JSON
  object schema (`type: object`; Gemini: or absent, for a function without parameters).
- OpenAI strict mode (`strict: true`, Structured Outputs): every object has
  `additionalProperties: false` and lists every property in `required`; every schema says its
  `type` (or is an `anyOf`, `$ref`, `enum` or `const`); only the supported keywords.
- Gemini (an OpenAPI 3.0 subset): every schema has one `type` name (or an `anyOf`); an object
  below the top has properties; `required` names only defined properties; an array has `items`;
  an `enum` belongs to a string.
"""

import json
import re
import sys

from pydantic import TypeAdapter

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
GEMINI_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$")

# Keywords Structured Outputs supports (the rest make a strict request fail).
STRICT_KEYWORDS = {
    "type", "description", "title", "properties", "required", "additionalProperties", "items",
    "enum", "const", "anyOf", "$ref", "$defs", "definitions", "default", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems",
    "maxItems", "nullable",
}
GEMINI_TYPES = {"string", "number", "integer", "boolean", "array", "object"}


def walk(value):
    """Iterates every nested value so lazy TypedDict list validators run (and raise)."""
    if isinstance(value, dict):
        for v in value.values():
            walk(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            walk(v)
    elif hasattr(value, "model_dump"):
        walk(value.model_dump())


def subschemas(schema, at):
    """(pointer, schema) of each schema directly inside `schema`."""
    for name, sub in (schema.get("properties") or {}).items():
        yield f"{at}/properties/{name}", sub
    items = schema.get("items")
    if isinstance(items, dict):
        yield f"{at}/items", items
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for i, sub in enumerate(schema.get(key) or []):
            yield f"{at}/{key}/{i}", sub
    for key in ("$defs", "definitions"):
        for name, sub in (schema.get(key) or {}).items():
            yield f"{at}/{key}/{name}", sub
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        yield f"{at}/additionalProperties", extra


def strict_refusal(schema, at=""):
    if not isinstance(schema, dict):
        return f"{at}: not a schema"
    unknown = sorted(set(schema) - STRICT_KEYWORDS)
    if unknown:
        return f"{at}: keyword {unknown[0]} is not supported in strict mode"
    if not any(k in schema for k in ("type", "anyOf", "$ref", "enum", "const")):
        return f"{at}: no type"
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "object" in kinds:
        if schema.get("additionalProperties") is not False:
            return f"{at}: an object without additionalProperties: false"
        if set(schema.get("required") or []) != set(schema.get("properties") or {}):
            return f"{at}: not every property is required"
    for path, sub in subschemas(schema, at):
        why = strict_refusal(sub, path)
        if why:
            return why
    return None


def gemini_refusal(schema, top, at=""):
    if not isinstance(schema, dict):
        return f"{at}: not a schema"
    kind = schema.get("type")
    if kind is None and "anyOf" not in schema:
        return f"{at}: no type"
    if kind is not None and (not isinstance(kind, str) or kind.lower() not in GEMINI_TYPES):
        return f"{at}: type {kind!r} is not one of Gemini's"
    kind = (kind or "").lower()
    properties = schema.get("properties") or {}
    if kind == "object" and not top and not properties:
        return f"{at}: an object without properties"
    for name in schema.get("required") or []:
        if name not in properties:
            return f"{at}: required {name!r} is not a defined property"
    if kind == "array" and not isinstance(schema.get("items"), dict):
        return f"{at}: an array without items"
    if "enum" in schema and (kind != "string" or not all(isinstance(v, str) for v in schema["enum"])):
        return f"{at}: an enum that is not of strings"
    for path, sub in subschemas(schema, at):
        why = gemini_refusal(sub, False, path)
        if why:
            return why
    return None


def entries(fmt, data):
    """(name, parameters, strict, the entry as the SDK type takes it) per tool."""
    if fmt == "openai":
        for t in data:
            f = t.get("function", {})
            yield f.get("name"), f.get("parameters"), f.get("strict") is True, t
    elif fmt == "responses":
        for t in data:
            yield t.get("name"), t.get("parameters"), t.get("strict") is True, t
    elif fmt == "anthropic":
        for t in data:
            yield t.get("name"), t.get("input_schema"), False, t
    elif fmt == "gemini":
        for tool in data:
            for d in tool.get("functionDeclarations", []):
                yield d.get("name"), d.get("parameters"), False, d
    else:
        raise SystemExit(f"unknown format {fmt!r}")


def adapter(fmt):
    if fmt == "openai":
        from openai.types.chat import ChatCompletionToolParam

        return TypeAdapter(ChatCompletionToolParam).validate_python
    if fmt == "responses":
        from openai.types.responses import FunctionToolParam

        return TypeAdapter(FunctionToolParam).validate_python
    if fmt == "anthropic":
        from anthropic.types import ToolParam

        return TypeAdapter(ToolParam).validate_python
    from google.genai import types

    return types.FunctionDeclaration.model_validate


def main():
    fmt, path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        data = json.load(f)
    validate = adapter(fmt)
    failures, names, count, strict = [], set(), 0, 0
    if fmt == "gemini":
        # The whole `tools` value too: a list of Tool objects with their declarations.
        from google.genai import types

        for i, tool in enumerate(data):
            try:
                walk(types.Tool.model_validate(tool))
            except Exception as e:
                failures.append(f"tools[{i}]: the SDK type refuses it: {str(e)[:300]}")
    for name, parameters, is_strict, entry in entries(fmt, data):
        count += 1
        pattern = GEMINI_NAME if fmt == "gemini" else NAME
        if not isinstance(name, str) or not pattern.match(name):
            failures.append(f"{name!r}: not a name the provider takes")
        if name in names:
            failures.append(f"{name!r}: exported twice")
        names.add(name)
        try:
            walk(validate(entry))
        except Exception as e:  # pydantic's ValidationError, or a lazy validator's
            failures.append(f"{name}: the SDK type refuses it: {str(e)[:300]}")
        if fmt == "gemini" and parameters is None:
            continue  # a function without parameters: Gemini takes the declaration without them
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            failures.append(f"{name}: the parameters are not an object schema")
            continue
        why = None
        if is_strict:
            strict += 1
            why = strict_refusal(parameters)
        if fmt == "gemini":
            why = gemini_refusal(parameters, True)
        if why:
            failures.append(f"{name}: {why}")
    print(json.dumps({"tools": count, "strict": strict, "failed": len(failures), "failures": failures[:50]}))


if __name__ == "__main__":
    main()
