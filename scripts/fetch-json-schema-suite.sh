#!/usr/bin/env bash
# Fetches the official JSON-Schema-Test-Suite from the PyPI `jsonschema` source archive (which
# carries a full copy under json/tests/) into .cache/, and prints the tests directory.
set -euo pipefail
version=4.26.0
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${TOOLGATE_CACHE:-$root/.cache}"
tests="$dest/jsonschema-$version/json/tests"
if [ ! -d "$tests/draft2020-12" ]; then
  mkdir -p "$dest"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --no-binary :all: "jsonschema==$version" -d "$tmp" >&2
  tar -xzf "$tmp/jsonschema-$version.tar.gz" -C "$dest"
fi
echo "$tests"
