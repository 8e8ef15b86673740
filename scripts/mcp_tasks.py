"""Drives MCP tasks (the io.modelcontextprotocol/tasks extension, SEP-2663) of `toolgate serve`
with the official Python MCP SDK 2.x, for the interop tests.

    mcp_tasks.py --url URL (--call NAME JSON [--cancel-when FILE])...

The client declares the extension through the SDK's own extension interface (`ClientExtension`
with a `ResultClaim` on the `task` result type), so `Client.call_tool` gets a task back and this
script's resolver follows it: it polls `tasks/get` at the interval the server suggests until the
task ends, and with `--cancel-when FILE` it sends `tasks/cancel` once FILE exists. Prints one JSON
object: the SDK version and per call whether a task was made, the statuses seen, `isError` and
the text of the result (for a cancelled task, `cancelled`).
"""

import asyncio
import importlib.metadata
import json
import os
import sys
from typing import Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter

from mcp import Client
from mcp.client.extension import ClientExtension, ResultClaim
from mcp_types import CallToolResult, Request, RequestParams, Result, TextContent

TASKS = "io.modelcontextprotocol/tasks"
ANY = TypeAdapter(dict[str, Any])


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


class Tasks(ClientExtension):
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


def parse(argv):
    url, calls = None, []
    i = 0
    while i < len(argv):
        if argv[i] == "--url":
            url = argv[i + 1]
            i += 2
        elif argv[i] == "--call":
            calls.append({"name": argv[i + 1], "args": json.loads(argv[i + 2]), "cancel_when": None})
            i += 3
        elif argv[i] == "--cancel-when":
            calls[-1]["cancel_when"] = argv[i + 1]
            i += 2
        else:
            raise SystemExit(f"unknown argument {argv[i]!r}")
    if not url or not calls:
        raise SystemExit(__doc__)
    return url, calls


async def run(url, calls):
    tasks = Tasks()
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
    url, calls = parse(sys.argv[1:])
    out = asyncio.run(asyncio.wait_for(run(url, calls), timeout=120))
    print(json.dumps({"version": importlib.metadata.version("mcp"), "calls": out}))


if __name__ == "__main__":
    main()
