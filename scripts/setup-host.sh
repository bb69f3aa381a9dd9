#!/usr/bin/env bash
# Installs what mysqlprobe needs on Debian 12, as root; skips what is there.
#   build:  clang, libbpf-dev, linux-libc-dev (uapi headers), gcc   -> probes/*.bpf.o
#   run:    libbpf1, python3 + venv
#   run:    linux-perf (CPU samples for flame graphs)
#   tests:  g++/binutils (fixtures), bpftool (probe checks), maven (MariaDB jars),
#           mariadb-server-core (Debian's stripped mariadbd), chromium (the HTML report
#           in a real browser), inferno from crates.io (reads our folded stacks), prometheus
#           (promtool checks the exposition), Go (go tool pprof reads our profiles), debuginfod
#           (serves a stripped server's debug file by build-id), systemtap-sdt-dev (sys/sdt.h:
#           USDT notes in a fixture); bench: bpftrace
set -euo pipefail

packages=(clang libbpf-dev libbpf1 linux-libc-dev gcc g++ binutils make bpftool bpftrace linux-perf
          python3 python3-venv python3-pip maven mariadb-server-core chromium ca-certificates sysbench
          prometheus debuginfod systemtap-sdt-dev)
# Go: the machines carry one in /usr/local/go; elsewhere Debian's
command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || packages+=(golang-go)
INFERNO_VERSION=0.12.8

if [ "$(id -u)" != 0 ]; then
    echo "setup-host.sh: run as root (apt-get, and the probes need root anyway)" >&2
    exit 1
fi

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# uprobes are created through perf events; tracefs is only looked at by the tests
mountpoint -q /sys/kernel/tracing 2>/dev/null || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true

# inferno (FlameGraph's format in Rust): the tests check it reads what we write
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v inferno-flamegraph >/dev/null; then
    if ! command -v cargo >/dev/null; then
        echo "installing: cargo (to build inferno)"
        apt-get install -y -qq --no-install-recommends cargo >/dev/null
    fi
    echo "building inferno $INFERNO_VERSION with cargo (a few minutes, once)"
    cargo install --quiet --locked inferno --version "$INFERNO_VERSION" \
        --bin inferno-flamegraph --bin inferno-diff-folded
fi
