#!/usr/bin/env python3
"""Drives `toolgate serve` fronting `bfcl_server.py` with the official Python MCP SDK 2.x client.

    corpus_client.py URL

Lists every page of `tools/list`, then calls every tool of the corpus listed, with the smallest arguments the
listed schema (the one a model is shown) accepts, eight calls at a time. Prints one JSON object:
`pages`, and per tool its `name`, `shown` (the `[corpus #I]` of its description), and the call's
`ran` (the definition that answered), or its `error` type and `message` when refused.
"""

import asyncio
import json
import re
import sys

MARK = re.compile(r"\[corpus #(\d+)\]$")


def sample(schema):
    """The smallest value `schema` plausibly accepts (enough for the corpus's schemas)."""
    if not isinstance(schema, dict):
        return "x"
    if schema.get("enum"):
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return sample(schema[key][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        return {name: sample(properties.get(name, {})) for name in schema.get("required", [])}
    if kind == "array":
        prefix = schema.get("prefixItems") or []
        items = [sample(s) for s in prefix]
        while len(items) < schema.get("minItems", 0):
            items.append(sample(schema.get("items", {})))
        return items
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return schema.get("minimum", 1.5)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return "x" * max(1, schema.get("minLength", 1))


async def main(url):
    from mcp import Client

    async with Client(url) as client:
        tools, cursor, pages = [], None, 0
        while pages < 1000:
            page = await client.list_tools(cursor=cursor)
            pages += 1
            tools += page.tools
            cursor = page.next_cursor
            if not cursor:
                break
        limit = asyncio.Semaphore(8)

        async def call(tool):
            shown = MARK.search(tool.description or "")
            out = {"name": tool.name, "shown": int(shown.group(1)) if shown else None}
            async with limit:
                result = await client.call_tool(tool.name, sample(tool.input_schema))
            text = "".join(getattr(c, "text", "") for c in result.content)
            try:
                body = json.loads(text)
            except ValueError:
                body = {"error": {"type": "not_json", "message": text[:300]}}
            if result.is_error or "error" in body:
                error = body.get("error", {})
                out["error"] = error.get("type", "unknown")
                out["message"] = str(error.get("message", text))[:300]
            else:
                out["ran"] = body.get("ran")
            return out

        # The corpus's tools only: the gateway's built-ins would wait for an approval.
        calls = await asyncio.gather(*(call(t) for t in tools if MARK.search(t.description or "")))
        return {"pages": pages, "tools": calls}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(asyncio.wait_for(main(sys.argv[1]), timeout=300))))
