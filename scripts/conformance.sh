#!/usr/bin/env bash
# The MCP conformance suite (@modelcontextprotocol/conformance, on Node 22 from the npm package
# node@22) against toolgate:
#   - its server scenarios required by the 2025-11-25 revision, over streamable HTTP, against
#     the gateway serving the suite's fixture tools, prompts and resources (the example
#     `conformance_server`: toolgate's router and pipeline, test fixtures only);
#   - the tasks extension's server scenarios against the same server;
#   - the server scenarios again against `toolgate serve` (the shipped binary) fronting that
#     server as its one, unprefixed upstream: everything passes through the product's proxying;
#   - its client scenarios initialize, tools_call, sse-retry and the auth/* scenarios against
#     toolgate's MCP client (the example `conformance_client`, given each scenario's URL: the
#     library path `serve` connects upstreams with);
#   - auth scenarios against the shipped binary (`scripts/conformance-login-client`: `toolgate
#     login`, then `toolgate tools` and `toolgate call` reading the tokens from the store).
# Installs the suite into .cache/ (idempotent), writes the results under target/conformance/,
# prints the pass counts, and exits non-zero when any scenario fails.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
suite_version=0.2.0-alpha.12
dest="${TOOLGATE_CACHE:-$root/.cache}/conformance"
if [ ! -x "$dest/node_modules/.bin/conformance" ] || [ ! -x "$dest/node_modules/.bin/node" ] \
  || ! grep -q "\"version\": \"$suite_version\"" "$dest/node_modules/@modelcontextprotocol/conformance/package.json" 2>/dev/null; then
  npm install --silent --no-audit --no-fund --prefix "$dest" "@modelcontextprotocol/conformance@$suite_version" "node@22" >&2
fi
export PATH="$dest/node_modules/.bin:$PATH"
echo "conformance $suite_version on node $(node --version)"

cargo build --quiet --release -p toolgate-mcp --example conformance_server --example conformance_client
cargo build --quiet --release -p toolgate-cli --bin toolgate
bin="$root/target/release/examples"
out="$root/target/conformance"
rm -rf "$out"
mkdir -p "$out"

# Waits until the process PID writes PATTERN to FILE (its stderr ERR is shown if it dies).
wait_for() { # PID FILE PATTERN ERR
  for _ in $(seq 1 100); do
    grep -q "$3" "$2" && return 0
    kill -0 "$1" 2>/dev/null || { cat "$4"; exit 1; }
    sleep 0.1
  done
}

log="$out/server.out"
"$bin/conformance_server" 127.0.0.1:0 > "$log" 2> "$out/server.err" &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true' EXIT
wait_for "$server_pid" "$log" '^listening ' "$out/server.err"
url="$(sed -n 's/^listening //p' "$log")"
[ -n "$url" ] || { echo "the fixture server did not start"; cat "$out/server.err"; exit 1; }

status=0
echo "== server scenarios (--requirements 2025-11-25) against $url"
if ! conformance server --url "$url" --requirements 2025-11-25 -o "$out/server" > "$out/server.log" 2>&1; then
  status=1
fi
sed -n '/=== SUMMARY ===/,$p' "$out/server.log"

# The tasks extension (SEP-2663): its scenarios against the same server (the fixture tools greet,
# slow_compute, failing_job and protocol_error_job run through the gateway's pipeline and task
# store). Left out: tasks-mrtr-input, tasks-mrtr-composition and tasks-dispatch-and-envelope,
# whose fixtures (confirm_delete, multi_input, test_tool_with_task) are tools that ask the client
# for input inside a running task; toolgate asks its approvals before a task starts, and does
# not park a running task on client input (tasks/update answers -32602).
echo "== tasks extension scenarios against $url"
for scenario in tasks-lifecycle tasks-capability-negotiation tasks-wire-fields tasks-request-state-removal \
  tasks-required-task-error tasks-request-headers tasks-status-notifications; do
  if conformance server --url "$url" --scenario "$scenario" -o "$out/tasks" > "$out/tasks-$scenario.log" 2>&1 \
    && grep -qE '^Passed: [0-9]+/[0-9]+, 0 failed' "$out/tasks-$scenario.log"; then
    echo "✓ $scenario: $(grep -E '^Passed:' "$out/tasks-$scenario.log" | tail -1)"
  else
    status=1
    echo "✗ $scenario"
    tail -20 "$out/tasks-$scenario.log"
  fi
done
# `toolgate serve` itself, as shipped, fronting that server as its one upstream (unprefixed):
# the suite's tools, prompts, resources, subscriptions, completions, logging, progress,
# sampling and elicitation all pass through the product's proxying and relay. The rules a user
# would write let the suite's tools and the server's sampling run without an approver.
echo "== server scenarios (--requirements 2025-11-25) against toolgate serve fronting it"
front="$out/front"
mkdir -p "$front/ws"
cat > "$front/gateway.toml" <<EOF
[mcp_servers.ref]
url = "$url"
unprefixed = true
trust_annotations = true

[permissions]
allow = ["test_*", "json_schema_*", "ref__sampling"]
EOF
"$root/target/release/toolgate" --config "$front/gateway.toml" --workspace "$front/ws" --store memory \
  serve --listen 127.0.0.1:0 > "$front/serve.out" 2> "$front/serve.err" &
front_pid=$!
trap 'kill "$server_pid" "$front_pid" 2>/dev/null || true' EXIT
wait_for "$front_pid" "$front/serve.err" 'MCP at http://' "$front/serve.err"
front_url="http://$(grep -o 'MCP at http://[^/]*' "$front/serve.err" | head -1 | sed 's|MCP at http://||')/mcp"
if ! conformance server --url "$front_url" --requirements 2025-11-25 -o "$out/front-results" > "$out/front.log" 2>&1; then
  status=1
fi
sed -n '/=== SUMMARY ===/,$p' "$out/front.log" | grep -E '^(✗|Total)' || true
kill "$front_pid" "$server_pid" 2>/dev/null || true

# Client scenarios. The authorization server of the auth scenarios redirects at once: the
# "browser" toolgate opens (`$BROWSER`) is curl following that redirect to toolgate's loopback.
export BROWSER="curl -fsSL -o /dev/null"
client_scenario() { # LABEL COMMAND SCENARIO
  local label="$1" command="$2" scenario="$3" log
  log="$out/client-$label-${scenario//\//_}.log"
  if conformance client --command "$command" --scenario "$scenario" -o "$out/client" > "$log" 2>&1 \
    && grep -qE '^Passed: [0-9]+/[0-9]+, 0 failed' "$log"; then
    echo "✓ $scenario: $(grep -E '^Passed:' "$log" | tail -1)"
  else
    status=1
    echo "✗ $scenario"
    tail -20 "$log"
  fi
}
# Every client scenario the 2025-11-25 revision requires, the
# client credentials extension, the 2025-03-26 fallbacks, and the attacks of the draft revision
# a client must refuse (a wrong or missing `iss`, a metadata issuer or resource of another
# server).
auth_scenarios="auth/metadata-default auth/metadata-var1 auth/metadata-var2 auth/metadata-var3 auth/basic-cimd
  auth/scope-from-www-authenticate auth/scope-from-scopes-supported auth/scope-omitted-when-undefined
  auth/scope-step-up auth/scope-retry-limit auth/token-endpoint-auth-basic auth/token-endpoint-auth-post
  auth/token-endpoint-auth-none auth/pre-registration auth/client-credentials-basic
  auth/2025-03-26-oauth-metadata-backcompat auth/2025-03-26-oauth-endpoint-fallback
  auth/iss-supported-missing auth/iss-wrong-issuer auth/iss-unexpected auth/iss-normalized
  auth/metadata-issuer-mismatch auth/resource-mismatch"
echo "== client scenarios against toolgate's MCP client (the library, as serve connects upstreams)"
for scenario in initialize tools_call sse-retry elicitation-sep1034-client-defaults $auth_scenarios; do
  client_scenario lib "$bin/conformance_client" "$scenario"
done
# The same auth scenarios through the shipped binary: `toolgate login`, then `toolgate tools`
# and `toolgate call` in new processes with the tokens from the SQLite store.
echo "== auth scenarios against the toolgate binary (login, then tools and call)"
export TOOLGATE_BIN="$root/target/release/toolgate"
for scenario in auth/metadata-default auth/metadata-var2 auth/metadata-var3 auth/basic-cimd auth/scope-step-up \
  auth/token-endpoint-auth-basic auth/token-endpoint-auth-post auth/pre-registration auth/client-credentials-basic \
  auth/iss-wrong-issuer auth/resource-mismatch; do
  client_scenario bin "$root/scripts/conformance-login-client" "$scenario"
done
exit "$status"
