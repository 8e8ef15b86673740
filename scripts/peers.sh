#!/usr/bin/env bash
# Installs the third-party software the interoperability tests run against into .cache/ (never
# into the repository's tracked files), and prints the environment the tests read:
#   TOOLGATE_AIMOCK   the mock LLM server speaking all four wire formats (@copilotkit/aimock's llmock)
#   TOOLGATE_PYTHON   a Python with the providers' SDKs (openai, anthropic, google-genai)
# Idempotent: a second run finds both and installs nothing.
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
echo "TOOLGATE_AIMOCK=$dest/node/node_modules/.bin/llmock"
echo "TOOLGATE_PYTHON=$dest/venv/bin/python"
