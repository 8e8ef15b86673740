#!/usr/bin/env bash
# Makes sure the PostgreSQL server the tests use (TOOLGATE_TEST_PG) answers: starts the local
# cluster when it is installed but stopped. Without a server, tests that need one are skipped —
# except under CI=true, where they fail, so this says why up front.
set -uo pipefail
url="${TOOLGATE_TEST_PG:-postgres://postgres@127.0.0.1:5432/test}"
ready() { command -v pg_isready >/dev/null && pg_isready -q -d "$url"; }
if ready; then
    exit 0
fi
if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    for version in $(ls /etc/postgresql); do
        pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null || true
    done
    for _ in $(seq 1 30); do
        ready && exit 0
        sleep 0.5
    done
fi
echo "scripts/ensure-postgres.sh: no PostgreSQL answers at $url; PostgreSQL tests are skipped (or fail under CI=true)" >&2
exit 0
