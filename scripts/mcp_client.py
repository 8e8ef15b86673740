"""Drives `toolgate serve` with the official Python MCP SDK, 1.x or 2.x, for the interop tests.

    mcp_client.py (--url URL | --stdio CMD [ARG...]) --call NAME JSON [--call NAME JSON ...]

Lists the tools, makes each call, and prints one JSON object: the SDK version, the tool names,
and per call `isError`, the text and `structuredContent`. 2.x uses the high-level `mcp.Client`
(it opens with `server/discover` and falls back to `initialize`); 1.x uses `ClientSession` and
the classic handshake.
"""

import asyncio
import importlib.metadata
import json
import sys


def parse(argv):
    url, stdio, calls = None, None, []
    i = 0
    while i < len(argv):
        if argv[i] == "--url":
            url = argv[i + 1]
            i += 2
        elif argv[i] == "--call":
            calls.append((argv[i + 1], json.loads(argv[i + 2])))
            i += 3
        elif argv[i] == "--stdio":
            stdio = argv[i + 1 :]
            break
        else:
            raise SystemExit(f"unknown argument {argv[i]!r}")
    return url, stdio, calls


def field(obj, camel, snake):
    # 1.x names fields in camelCase, 2.x in snake_case.
    return getattr(obj, camel, None) if hasattr(obj, camel) else getattr(obj, snake, None)


def summary(result):
    text = "".join(getattr(c, "text", "") for c in result.content)
    return {
        "isError": bool(field(result, "isError", "is_error")),
        "text": text,
        "structured": field(result, "structuredContent", "structured_content"),
    }


async def run_v2(url, stdio, calls):
    from mcp import Client, StdioServerParameters

    server = url if url else StdioServerParameters(command=stdio[0], args=stdio[1:])
    async with Client(server) as client:
        tools = await client.list_tools()
        out = {"tools": [t.name for t in tools.tools], "calls": []}
        for name, args in calls:
            out["calls"].append(summary(await client.call_tool(name, args)))
        return out


async def run_v1(url, stdio, calls):
    from mcp import ClientSession, StdioServerParameters

    async def session_calls(read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            out = {"tools": [t.name for t in tools.tools], "calls": []}
            for name, args in calls:
                out["calls"].append(summary(await session.call_tool(name, args)))
            return out

    if url:
        from mcp.client.streamable_http import streamablehttp_client

        async with streamablehttp_client(url) as (read, write, _):
            return await session_calls(read, write)
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=stdio[0], args=stdio[1:])
    async with stdio_client(params) as (read, write):
        return await session_calls(read, write)


def main():
    url, stdio, calls = parse(sys.argv[1:])
    version = importlib.metadata.version("mcp")
    run = run_v2 if version.startswith("2.") else run_v1
    out = asyncio.run(asyncio.wait_for(run(url, stdio, calls), timeout=60))
    out["version"] = version
    print(json.dumps(out))


if __name__ == "__main__":
    main()
