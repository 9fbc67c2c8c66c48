#!/usr/bin/env python3
"""Acceptance of `aware init claude-code`: run the hook and the MCP server exactly as Claude Code
would, from the configs `init` wrote into a project.

Usage: init_config_client.py PROJECT_DIR SESSION_KEY

Reads PROJECT_DIR/.claude/settings.json and runs its UserPromptSubmit command through `sh -c`
with a hook JSON on stdin; reads PROJECT_DIR/.mcp.json and starts the `aware` server with its
command, args and env through the official Python SDK's stdio client, then calls session_status
and checks it answers for SESSION_KEY. Prints `N passed, M failed`; exits non-zero on failure.
"""

import asyncio
import json
import os
import subprocess
import sys

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

passed = 0
failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def run_hook(project):
    with open(os.path.join(project, ".claude", "settings.json")) as f:
        settings = json.load(f)
    commands = [
        h["command"]
        for group in settings["hooks"]["UserPromptSubmit"]
        for h in group["hooks"]
        if h.get("type") == "command"
    ]
    check("settings.json: one hook command", len(commands) == 1, commands)
    hook_input = {
        "session_id": "init-acceptance",
        "hook_event_name": "UserPromptSubmit",
        "prompt": "hello from the acceptance run",
        "cwd": project,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWARE_")}
    p = subprocess.run(
        ["sh", "-c", commands[0]],
        input=json.dumps(hook_input),
        capture_output=True,
        text=True,
        cwd=project,
        env=env,
        timeout=30,
    )
    check("hook: exit 0 without a warning", p.returncode == 0 and p.stderr == "", (p.returncode, p.stderr))


async def run_mcp(project, session_key):
    with open(os.path.join(project, ".mcp.json")) as f:
        server = json.load(f)["mcpServers"]["aware"]
    check("mcp.json: absolute command", os.path.isabs(server["command"]), server)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWARE_")}
    env.update(server.get("env", {}))
    params = StdioServerParameters(command=server["command"], args=server["args"], env=env, cwd=project)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            check("initialize: server name is aware", init.server_info.name == "aware", init.server_info)
            r = await session.call_tool("session_status", {})
            sc = r.structured_content or {}
            check("session_status of the project's session", not r.is_error and sc.get("sessionKey") == session_key, r)
            r = await session.call_tool("sessions_history", {"sessionKey": session_key})
            texts = [m.get("text") for m in (r.structured_content or {}).get("messages", [])]
            check("the hook's prompt is in the session", "hello from the acceptance run" in texts, r)


def main():
    project, session_key = sys.argv[1], sys.argv[2]
    run_hook(project)
    asyncio.run(run_mcp(project, session_key))
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
