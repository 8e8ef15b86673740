#!/usr/bin/env bash
# Installs the third-party software the interoperability tests run against into .cache/ (never
# into the repository's tracked files), and prints the environment the tests read:
#   TOOLGATE_AIMOCK   the mock LLM server speaking all four wire formats (@copilotkit/aimock's llmock)
#   TOOLGATE_PYTHON   a Python with the providers' SDKs (openai, anthropic, google-genai)
#   TOOLGATE_MCP_EVERYTHING  the MCP reference server "everything" (stdio or streamable HTTP)
#   TOOLGATE_MCP_TIME        the Python reference server mcp-server-time (stdio)
#   TOOLGATE_MCP_PY1 / TOOLGATE_MCP_PY2  Pythons with the official MCP SDK, 1.x and 2.x
#   TOOLGATE_BFCL_DATA       the Berkeley Function Calling Leaderboard's data (the bfcl-eval
#                            package's data/ folder: 3,420 real-world function definitions)
# Idempotent: a second run finds them and installs nothing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${TOOLGATE_CACHE:-$root/.cache}/peers"
mkdir -p "$dest"
aimock_version=1.43.0
if [ ! -x "$dest/node/node_modules/.bin/llmock" ]; then
  npm install --silent --no-audit --no-fund --prefix "$dest/node" "@copilotkit/aimock@$aimock_version" >&2
fi
if [ ! -x "$dest/venv/bin/python" ] || ! "$dest/venv/bin/python" -c "import openai, anthropic, google.genai" 2>/dev/null; then
  python3 -m venv "$dest/venv"
  "$dest/venv/bin/pip" install --quiet --disable-pip-version-check openai anthropic google-genai >&2
fi
everything_version=2026.8.31
if [ ! -x "$dest/node/node_modules/.bin/mcp-server-everything" ]; then
  npm install --silent --no-audit --no-fund --prefix "$dest/node" "@modelcontextprotocol/server-everything@$everything_version" >&2
fi
# Two MCP SDK lines: 1.x does the classic handshake, 2.x opens with server/discover.
for line in 1 2; do
  venv="$dest/mcp$line"
  spec="mcp>=1.20,<2"
  [ "$line" = 2 ] && spec="mcp>=2,<3"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('mcp').startswith('$line.')" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$spec" >&2
  fi
done
# The time server in its own venv: it pulls the SDK line it wants.
if [ ! -x "$dest/time/bin/mcp-server-time" ]; then
  python3 -m venv "$dest/time"
  "$dest/time/bin/pip" install --quiet --disable-pip-version-check mcp-server-time >&2
fi
# The BFCL data only: the package's wheel is downloaded and its data/ folder unpacked (installing
# it would pull in its evaluation stack, which nothing here runs).
bfcl_version=2026.3.23
if [ ! -f "$dest/bfcl-$bfcl_version/bfcl_eval/data/BFCL_v4_simple_python.json" ]; then
  rm -rf "$dest/bfcl-$bfcl_version" "$dest/bfcl-wheel"
  "$dest/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
    -d "$dest/bfcl-wheel" "bfcl-eval==$bfcl_version" >&2
  "$dest/venv/bin/python" -m zipfile -e "$dest/bfcl-wheel/bfcl_eval-$bfcl_version-py3-none-any.whl" "$dest/bfcl-$bfcl_version" >&2
  rm -rf "$dest/bfcl-wheel"
fi
echo "TOOLGATE_AIMOCK=$dest/node/node_modules/.bin/llmock"
echo "TOOLGATE_PYTHON=$dest/venv/bin/python"
echo "TOOLGATE_MCP_EVERYTHING=$dest/node/node_modules/.bin/mcp-server-everything"
echo "TOOLGATE_MCP_TIME=$dest/time/bin/mcp-server-time"
echo "TOOLGATE_MCP_PY1=$dest/mcp1/bin/python"
echo "TOOLGATE_MCP_PY2=$dest/mcp2/bin/python"
echo "TOOLGATE_BFCL_DATA=$dest/bfcl-$bfcl_version/bfcl_eval/data"
