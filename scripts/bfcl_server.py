#!/usr/bin/env python3
"""An MCP server (the official SDK's low-level `Server`, over stdio) serving every distinct function
definition of the Berkeley Function Calling Leaderboard (the `bfcl-eval` package's data: 3,420
definitions written for real APIs, with the type names real servers send — `dict`, `float`, `any`,
Java's `String` and `HashMap` …) as one tool each, exactly as the data gives them.

    python bfcl_server.py DATA_DIR          serve them
    python bfcl_server.py DATA_DIR --count  print how many there are

A name defined more than once with different definitions is served once as itself and then as
`NAME-2`, `NAME-3` … (an MCP server's tool names are unique). Each description ends with
` [corpus #I]`, I the definition's index; a call answers `{"ran": I}`, so a client can tell which
definition ran for the description it was shown.
"""

import glob
import json
import os
import sys


def definitions(data):
    """The distinct definitions, in a stable order: the data files sorted, each in its order."""
    seen, out = set(), []

    def add(d):
        key = json.dumps(d, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(d)

    for path in sorted(glob.glob(os.path.join(data, "BFCL_v4_*.json"))):
        with open(path) as f:
            for line in f:
                if not line.startswith('{"id"'):
                    continue
                functions = json.loads(line).get("function") or []
                for d in functions if isinstance(functions, list) else [functions]:
                    add(d)
    for path in sorted(glob.glob(os.path.join(data, "multi_turn_func_doc", "*.json"))):
        with open(path) as f:
            for line in f:
                if line.strip():
                    add(json.loads(line))
    return out


def tools(data):
    """(served name, description, input schema) for each definition."""
    times, out = {}, []
    for i, d in enumerate(definitions(data)):
        n = times[d["name"]] = times.get(d["name"], 0) + 1
        name = d["name"] if n == 1 else f"{d['name']}-{n}"
        out.append((name, f"{d.get('description', '')} [corpus #{i}]", d.get("parameters") or {}))
    return out


def main():
    data = sys.argv[1]
    served = tools(data)
    if "--count" in sys.argv[2:]:
        print(len(served))
        return

    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    index = {name: i for i, (name, _, _) in enumerate(served)}
    listed = [types.Tool(name=n, description=d, inputSchema=s) for n, d, s in served]
    server = Server("bfcl")

    @server.list_tools()
    async def list_tools():
        return listed

    # The SDK would check arguments against these schemas itself, and its checker knows no
    # `dict` or `float`: the gateway in front is what is under test.
    @server.call_tool(validate_input=False)
    async def call_tool(name, arguments):
        if name not in index:
            raise ValueError(f"no tool {name}")
        return [types.TextContent(type="text", text=json.dumps({"ran": index[name]}))]

    async def run():
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


if __name__ == "__main__":
    main()
