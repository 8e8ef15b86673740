#!/usr/bin/env bash
# The web console's browser test: Debian's Chromium driven by playwright-core, the official
# TypeScript MCP SDK as the client that asks, against the release `toolgate serve`.
# Installs what it needs: chromium (apt, when missing), and playwright-core and the SDK (npm, into
# .cache/console). Screenshots land in target/console/. Exits non-zero when a check fails.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
chromium="${CHROMIUM:-$(command -v chromium || true)}"
if [ -z "$chromium" ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
    chromium="$(command -v chromium)"
  else
    echo "the console test needs Chromium: apt-get install chromium (as root), or set CHROMIUM" >&2
    exit 1
  fi
fi
modules="${TOOLGATE_CACHE:-$root/.cache}/console"
playwright=1.65.1
sdk=1.32.2
if ! grep -q "\"version\": \"$playwright\"" "$modules/node_modules/playwright-core/package.json" 2>/dev/null \
  || ! grep -q "\"version\": \"$sdk\"" "$modules/node_modules/@modelcontextprotocol/sdk/package.json" 2>/dev/null; then
  mkdir -p "$modules"
  npm install --silent --no-audit --no-fund --prefix "$modules" "playwright-core@$playwright" "@modelcontextprotocol/sdk@$sdk" >&2
fi
cargo build --quiet --release -p toolgate-cli
CONSOLE_MODULES="$modules/node_modules" TOOLGATE_BIN="$root/target/release/toolgate" CHROMIUM="$chromium" \
  SHOTS="$root/target/console" node scripts/console-test.mjs
