#!/usr/bin/env python3
"""Resident memory of `toolgate serve` per upstream tool, the figures in BENCHMARKS.md.

    scripts/bench-tool-memory.py TOOLGATE_BINARY PYTHON_WITH_MCP

Starts `serve --store memory` fronting scripts/many_tools_server.py with N = 0, 100, 1,000 and
10,000 tools, reads VmRSS once it serves and again after paging through `tools/list` over HTTP,
and reports the pagination: pages, tools listed, the largest page's body (an SSE event the Python
SDK 2.x refuses above 1 MiB) and the time the walk took.
"""
import json, os, re, subprocess, sys, tempfile, time, urllib.request
binary, py = sys.argv[1], sys.argv[2]
here = os.path.dirname(os.path.abspath(__file__))
server = os.path.join(here, "many_tools_server.py")
# With a third argument (the BFCL data folder, TOOLGATE_BFCL_DATA), the real-world corpus too:
# its 3,420 definitions served by scripts/bfcl_server.py.
bfcl = sys.argv[3] if len(sys.argv) > 3 else None
def rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
def post(url, body, sid=None):
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    if sid: h["Mcp-Session-Id"] = sid
    r = urllib.request.urlopen(urllib.request.Request(url, json.dumps(body).encode(), h), timeout=120)
    return r.headers.get("Mcp-Session-Id"), r.read().decode()
for n in [0, 100, 1000, 10000] + (["bfcl"] if bfcl else []):
    d = tempfile.mkdtemp()
    cfg = os.path.join(d, "g.toml")
    with open(cfg, "w") as f:
        if n == "bfcl":
            f.write(f'[mcp_servers.bfcl]\ncommand = "{py}"\nargs = ["{os.path.join(here, "bfcl_server.py")}", "{bfcl}"]\nstartup_timeout_secs = 300\n')
        elif n:
            f.write(f'[mcp_servers.many]\ncommand = "{py}"\nargs = ["{server}", "{n}"]\nstartup_timeout_secs = 300\n')
    p = subprocess.Popen([binary, "--config", cfg, "--workspace", d, "--store", "memory", "serve", "--listen", "127.0.0.1:0"],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=dict(os.environ, XDG_CONFIG_HOME=d, XDG_DATA_HOME=d))
    url = None
    for line in p.stderr:
        line = line.decode()
        m = re.search(r"MCP at (http://[^,]*)", line)
        if m:
            url = m.group(1); break
    time.sleep(1)
    before = rss(p.pid)
    sid, _ = post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "m", "version": "1"}}})
    post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    cursor, pages, listed, largest = None, 0, 0, 0
    started = time.monotonic()
    while True:
        params = {"cursor": cursor} if cursor else {}
        _, body = post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": params}, sid)
        if body.startswith("{"):
            data = json.loads(body)
        else:
            data = next(json.loads(l[6:]) for l in body.splitlines() if l.startswith("data: {") and '"result"' in l)
        pages += 1
        largest = max(largest, len(body.encode()))
        listed += len(data["result"]["tools"])
        cursor = data["result"].get("nextCursor")
        if not cursor: break
    walk_ms = (time.monotonic() - started) * 1000
    after = rss(p.pid)
    print(f"{n:>6} tools: RSS {before/1024:7.1f} MB after start, {after/1024:7.1f} MB after tools/list; "
          f"{listed} tools in {pages} pages, largest page {largest/1024:.0f} KiB, walk {walk_ms:.0f} ms", flush=True)
    p.terminate(); p.wait()
