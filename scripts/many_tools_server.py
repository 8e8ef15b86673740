#!/usr/bin/env python3
"""An MCP server (the official SDK's FastMCP, over stdio) with N tools, each described in ~900
bytes, so the whole list is larger than one server-sent event a client accepts (1 MiB).

    python many_tools_server.py N
"""

import sys

from mcp.server.fastmcp import FastMCP


def make(i):
    def tool(q: str) -> str:
        return f"tool {i}: {q}"

    return tool


def main():
    n = int(sys.argv[1])
    server = FastMCP("many")
    for i in range(n):
        server.add_tool(make(i), name=f"tool_{i:05d}", description=f"Tool number {i}. " + "Detail. " * 110)
    server.run()


if __name__ == "__main__":
    main()
