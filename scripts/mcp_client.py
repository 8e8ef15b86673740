"""Drives `toolgate serve` with the official Python MCP SDK, 1.x or 2.x, for the interop tests.

    mcp_client.py [--approve URL TOKEN] [--elicit JSON ...] (--url URL | --stdio CMD [ARG...]) --call NAME JSON [--call NAME JSON ...]

Lists the tools (every page, following the cursors), makes each call, and prints one JSON object:
the SDK version, the tool names and how many pages they came in,
and per call `isError`, the text and `structuredContent`. `$HANDLE` in a call's JSON is the
`read_result` handle the latest truncated result named, so a later call can page through an
earlier one. `--approve` answers the first ask of the gateway's queue with `approve_tool`
(and only the first: a later ask of the same tool would wait, and time out). `--elicit` makes the
client answer elicitation: each form it is shown is accepted with the next JSON given (the last
one repeats), and `asked` lists the forms' messages. 2.x uses the high-level `mcp.Client`
(it opens with `server/discover` and falls back to `initialize`); 1.x uses `ClientSession` and
the classic handshake.
"""

import asyncio
import importlib.metadata
import json
import re
import sys
import threading
import time


def parse(argv):
    url, stdio, calls, approve, elicit = None, None, [], None, []
    i = 0
    while i < len(argv):
        if argv[i] == "--elicit":
            elicit.append(json.loads(argv[i + 1]))
            i += 2
        elif argv[i] == "--url":
            url = argv[i + 1]
            i += 2
        elif argv[i] == "--approve":
            approve = (argv[i + 1], argv[i + 2])
            i += 3
        elif argv[i] == "--call":
            calls.append((argv[i + 1], argv[i + 2]))
            i += 3
        elif argv[i] == "--stdio":
            stdio = argv[i + 1 :]
            break
        else:
            raise SystemExit(f"unknown argument {argv[i]!r}")
    return url, stdio, calls, approve, elicit


class Elicit:
    """Answers elicitation forms with the answers given, in order, and notes what was asked."""

    def __init__(self, answers):
        self.answers, self.asked = answers, []

    def callback(self):
        if not self.answers:
            return None

        async def answer(context, params):
            from mcp.types import ElicitResult

            self.asked.append(params.message)
            content = self.answers[min(len(self.asked), len(self.answers)) - 1]
            return ElicitResult(action="accept", content=content)

        return answer


HANDLE = re.compile(r"read_result handle=([A-Za-z0-9_-]+)")


class Calls:
    """The calls in order, `$HANDLE` replaced by the latest handle seen."""

    def __init__(self, calls):
        self.calls, self.handle = calls, ""

    def __iter__(self):
        for name, text in self.calls:
            yield name, json.loads(text.replace("$HANDLE", self.handle))

    def saw(self, summary):
        found = HANDLE.findall(summary["text"])
        if found:
            self.handle = found[-1]
        return summary


def answer_first_ask(base, token):
    """Polls the gateway's queue (a thread: the SDKs' event loops stay untouched) and answers
    the first ask with approve_tool."""
    import urllib.request

    def get():
        req = urllib.request.Request(base + "/v1/approvals", headers={"Authorization": "Bearer " + token})
        return json.load(urllib.request.urlopen(req, timeout=5))

    def run():
        deadline = time.time() + 50
        while time.time() < deadline:
            asks = get()["approvals"]
            if asks:
                body = json.dumps({"decision": "approve_tool"}).encode()
                req = urllib.request.Request(
                    base + "/v1/approvals/" + asks[0]["id"],
                    data=body,
                    headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"},
                )
                urllib.request.urlopen(req, timeout=5).read()
                return
            time.sleep(0.05)

    threading.Thread(target=run, daemon=True).start()


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


async def all_tools(list_tools):
    """Every tool name, page after page as the server's cursors lead; and how many pages."""
    names, cursor, pages = [], None, 0
    while pages < 1000:
        page = await list_tools(cursor=cursor)
        pages += 1
        names += [t.name for t in page.tools]
        cursor = field(page, "nextCursor", "next_cursor")
        if not cursor:
            break
    return names, pages


async def run_v2(url, stdio, calls, elicit):
    from mcp import Client, StdioServerParameters

    server = url if url else StdioServerParameters(command=stdio[0], args=stdio[1:])
    async with Client(server, elicitation_callback=elicit.callback()) as client:
        names, pages = await all_tools(client.list_tools)
        out = {"tools": names, "pages": pages, "calls": []}
        for name, args in calls:
            out["calls"].append(calls.saw(summary(await client.call_tool(name, args))))
        return out


async def run_v1(url, stdio, calls, elicit):
    from mcp import ClientSession, StdioServerParameters

    async def session_calls(read, write):
        async with ClientSession(read, write, elicitation_callback=elicit.callback()) as session:
            await session.initialize()
            names, pages = await all_tools(session.list_tools)
            out = {"tools": names, "pages": pages, "calls": []}
            for name, args in calls:
                out["calls"].append(calls.saw(summary(await session.call_tool(name, args))))
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
    url, stdio, calls, approve, answers = parse(sys.argv[1:])
    calls, elicit = Calls(calls), Elicit(answers)
    if approve:
        answer_first_ask(*approve)
    version = importlib.metadata.version("mcp")
    run = run_v2 if version.startswith("2.") else run_v1
    out = asyncio.run(asyncio.wait_for(run(url, stdio, calls, elicit), timeout=60))
    out["version"] = version
    out["asked"] = elicit.asked
    print(json.dumps(out))


if __name__ == "__main__":
    main()
