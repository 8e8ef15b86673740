#!/usr/bin/env python3
"""Paired wall time of `toolgate call read_file` for two toolgate binaries, beside `cat`.

    scripts/bench-cli-call.py OLD_BINARY NEW_BINARY [ROUNDS]

Makes a workspace and, per binary, an empty store and one holding 200 MB of unexpired results
(each binary its own: a newer one migrates its file), then runs `cat`, old and new alternately
ROUNDS times (25) per store and prints the medians. The figures in BENCHMARKS.md come from it.
"""

import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    old, new = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 25
    root = tempfile.mkdtemp(prefix="tg-cli-bench-")
    ws = os.path.join(root, "ws")
    os.makedirs(ws)
    with open(os.path.join(ws, "a.txt"), "w") as f:
        f.write("hello\n")
    call = ["call", "read_file", '{"path": "a.txt"}']

    def env(store):
        e = dict(os.environ)
        e["XDG_DATA_HOME"] = os.path.join(root, store)
        e["XDG_CONFIG_HOME"] = os.path.join(root, "config")
        return e

    def run(args, e):
        t = time.perf_counter()
        subprocess.run(args, stdout=subprocess.DEVNULL, env=e, check=True)
        return (time.perf_counter() - t) * 1000

    blob = os.urandom(51200).hex()
    for name, binary in (("old", old), ("new", new)):
        for size in ("0", "200"):
            store = f"{name}-{size}"
            run([binary, "--workspace", ws] + call, env(store))
            if size == "200":
                db = sqlite3.connect(os.path.join(root, store, "toolgate", "toolgate.db"))
                db.executemany(
                    "INSERT INTO results (session_id, handle, value, bytes, created_at, expires_at) VALUES (?,?,?,?,?,?)",
                    [(f"s{i}", f"h{i}", blob, 102400, 0, 9000000000000000) for i in range(2000)],
                )
                db.commit()
                db.close()
    cases = [("cat", ["cat", os.path.join(ws, "a.txt")], env("old-0"))]
    for size in ("0", "200"):
        for name, binary in (("old", old), ("new", new)):
            cases.append((f"{name} {size} MB", [binary, "--workspace", ws] + call, env(f"{name}-{size}")))
    for name, binary in (("old", old), ("new", new)):
        cases.append((f"{name} memory", [binary, "--workspace", ws, "--store", "memory"] + call, env(f"{name}-0")))
    times = {name: [] for name, _, _ in cases}
    for _ in range(rounds):
        for name, args, e in cases:
            times[name].append(run(args, e))
    for name, t in times.items():
        print(f"{name:14s} median {statistics.median(t):6.1f} ms  (min {min(t):.1f})")


if __name__ == "__main__":
    main()
