"""Drives MCP tasks of `toolgate serve` with the official Python MCP SDK, for the interop tests.

    mcp_tasks.py (--url URL | --stdio CMD [ARG...]) (--call NAME JSON [--cancel-when FILE])...

2.x: the tasks extension (SEP-2663), declared through the SDK's own extension interface
(`ClientExtension` with a `ResultClaim` on the `task` result type), so `Client.call_tool` gets a
task back and this script's resolver follows it with `tasks/get` at the interval the server
suggests. 1.x: the tasks of the 2025-11-25 revision through `session.experimental`
(`call_tool_as_task`, `get_task`, `get_task_result`, `list_tasks`, `cancel_task`). Either way,
with `--cancel-when FILE` the task is cancelled once FILE exists. Prints one JSON object: the SDK
version, per call whether a task was made, the statuses seen, `isError` and the text of the
result (for a cancelled task, `cancelled`), and (1.x) the statuses `notifications/tasks/status`
gave and the ids `tasks/list` gave.
"""

import asyncio
import importlib.metadata
import json
import os
import sys
from typing import Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter

VERSION = importlib.metadata.version("mcp")
TASKS = "io.modelcontextprotocol/tasks"
ANY = TypeAdapter(dict[str, Any])


def v2_tasks_extension():
    """The 2.x client extension that follows tasks (defined only where the 2.x SDK is)."""
    from mcp.client.extension import ClientExtension, ResultClaim
    from mcp_types import CallToolResult, Request, RequestParams, Result, TextContent

    class CreateTaskResult(Result):
        model_config = ConfigDict(extra="allow", populate_by_name=True)
        result_type: Literal["task"] = Field(alias="resultType")
        task_id: str = Field(alias="taskId")
        status: str
        poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")

    class TaskParams(RequestParams):
        task_id: str = Field(alias="taskId")

    class GetTask(Request[TaskParams, Literal["tasks/get"]]):
        method: Literal["tasks/get"] = "tasks/get"
        params: TaskParams
        name_param = "taskId"

    class CancelTask(Request[TaskParams, Literal["tasks/cancel"]]):
        method: Literal["tasks/cancel"] = "tasks/cancel"
        params: TaskParams
        name_param = "taskId"

    class Tasks(ClientExtension):  # 2.x
        identifier = TASKS

        def __init__(self):
            self.seen = []  # per task: the statuses seen
            self.cancel_when = None

        def claims(self):
            return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self.follow)]

        async def follow(self, created: CreateTaskResult, ctx) -> CallToolResult:
            statuses = [created.status]
            self.seen.append(statuses)
            every = max(0.05, min(5.0, (created.poll_interval_ms or 500) / 1000))
            cancelled = False
            for _ in range(2400):
                if self.cancel_when and not cancelled and os.path.exists(self.cancel_when):
                    await ctx.session.send_request(CancelTask(params=TaskParams(taskId=created.task_id)), ANY)
                    cancelled = True
                got: dict[str, Any] = await ctx.session.send_request(
                    GetTask(params=TaskParams(taskId=created.task_id)), ANY
                )
                if statuses[-1] != got["status"]:
                    statuses.append(got["status"])
                if got["status"] == "completed":
                    return CallToolResult.model_validate(got["result"])
                if got["status"] in ("failed", "cancelled"):
                    return CallToolResult(content=[TextContent(type="text", text=got["status"])], is_error=True)
                await asyncio.sleep(every)
            raise TimeoutError(f"task {created.task_id} did not end")

    return Tasks()


def parse(argv):
    url, stdio, calls = None, None, []
    i = 0
    while i < len(argv):
        if argv[i] == "--url":
            url = argv[i + 1]
            i += 2
        elif argv[i] == "--stdio":
            stdio = argv[i + 1 :]
            break
        elif argv[i] == "--call":
            calls.append({"name": argv[i + 1], "args": json.loads(argv[i + 2]), "cancel_when": None})
            i += 3
        elif argv[i] == "--cancel-when":
            calls[-1]["cancel_when"] = argv[i + 1]
            i += 2
        else:
            raise SystemExit(f"unknown argument {argv[i]!r}")
    if not (url or stdio) or not calls:
        raise SystemExit(__doc__)
    return url, stdio, calls


async def run_v1(url, stdio, calls):
    from mcp import ClientSession, StdioServerParameters
    from mcp.types import CallToolResult, ServerNotification, TaskStatusNotification

    notified = {}  # task id -> the statuses notifications/tasks/status gave

    async def on_message(message):
        if isinstance(message, ServerNotification) and isinstance(message.root, TaskStatusNotification):
            params = message.root.params
            notified.setdefault(params.taskId, []).append(params.status)

    async def drive(session):
        await session.initialize()
        tasks = session.experimental
        out, ids = [], []
        for call in calls:
            created = await tasks.call_tool_as_task(call["name"], call["args"], ttl=600000)
            task_id = created.task.taskId
            ids.append(task_id)
            statuses, cancelled = [created.task.status], False
            for _ in range(2400):
                if call["cancel_when"] and not cancelled and os.path.exists(call["cancel_when"]):
                    ended = await tasks.cancel_task(task_id)
                    statuses.append(ended.status)
                    cancelled = True
                got = await tasks.get_task(task_id)
                if statuses[-1] != got.status:
                    statuses.append(got.status)
                if got.status in ("completed", "failed", "cancelled"):
                    break
                await asyncio.sleep(max(0.05, (got.pollInterval or 500) / 1000))
            if statuses[-1] == "completed":
                result = await tasks.get_task_result(task_id, CallToolResult)
                related = (result.meta or {}).get("io.modelcontextprotocol/related-task", {})
                text = "".join(getattr(c, "text", "") for c in result.content)
                out.append({"task": True, "statuses": statuses, "isError": bool(result.isError), "text": text,
                            "related": related.get("taskId") == task_id})
            else:
                out.append({"task": True, "statuses": statuses, "isError": True, "text": statuses[-1]})
        listed = await tasks.list_tasks()
        # Notifications are a courtesy: wait a moment for those of ended tasks.
        for _ in range(100):
            if all(notified.get(i) for i in ids):
                break
            await asyncio.sleep(0.05)
        for call, task_id in zip(out, ids):
            call["notified"] = notified.get(task_id, [])
        return out, [t.taskId for t in listed.tasks], ids

    if url:
        from mcp.client.streamable_http import streamablehttp_client

        async with streamablehttp_client(url) as (read, write, _):
            async with ClientSession(read, write, message_handler=on_message) as session:
                return await drive(session)
    from mcp.client.stdio import stdio_client

    async with stdio_client(StdioServerParameters(command=stdio[0], args=stdio[1:])) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            return await drive(session)


async def run(url, stdio, calls):
    from mcp import Client

    if stdio:
        raise SystemExit("2.x is driven over HTTP here")
    tasks = v2_tasks_extension()
    out = []
    async with Client(url, extensions=[tasks]) as client:
        for call in calls:
            tasks.cancel_when = call["cancel_when"]
            before = len(tasks.seen)
            result = await client.call_tool(call["name"], call["args"])
            made = len(tasks.seen) > before
            out.append(
                {
                    "task": made,
                    "statuses": tasks.seen[-1] if made else [],
                    "isError": bool(result.is_error),
                    "text": "".join(getattr(c, "text", "") for c in result.content),
                }
            )
    return out


def main():
    url, stdio, calls = parse(sys.argv[1:])
    if VERSION.startswith("2."):
        out = asyncio.run(asyncio.wait_for(run(url, stdio, calls), timeout=120))
        print(json.dumps({"version": VERSION, "calls": out}))
    else:
        out, listed, ids = asyncio.run(asyncio.wait_for(run_v1(url, stdio, calls), timeout=120))
        print(json.dumps({"version": VERSION, "calls": out, "listed": listed, "ids": ids}))


if __name__ == "__main__":
    main()
