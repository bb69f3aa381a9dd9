#!/usr/bin/env bash
# ruff over the whole tree, then mypy over the package as setup.py lays it
# out (collectors/ is mysqlprobe.collectors, ...), through a tree of links.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=$(cd "${BIN:-.venv/bin}" && pwd)
"$bin/ruff" check mysqlprobe collectors analysis flamegraphs probes tests bench scripts
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir "$tree/mysqlprobe"
for f in mysqlprobe/*; do ln -s "$root/$f" "$tree/mysqlprobe/"; done
for d in collectors analysis flamegraphs probes; do ln -s "$root/$d" "$tree/mysqlprobe/$d"; done
cd "$tree"
"$bin/mypy" --config-file "$root/pyproject.toml" --cache-dir "$root/.mypy_cache" -p mysqlprobe
