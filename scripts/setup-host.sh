#!/usr/bin/env bash
# Installs what mysqlprobe needs on Debian 12, as root; skips what is there.
#   setup-host.sh host   what a database host needs to run the wheel (`make wheel`): libbpf, perf, python3
#   setup-host.sh run    the product: build and run (clang, libbpf, perf, python3)
#   setup-host.sh demo   run, and the lab's sandbox servers (maven fetches MariaDB from Maven Central)
#   setup-host.sh test   demo, and the tools the tests check mysqlprobe against: g++/binutils (fixtures),
#                        bpftool, bpftrace, mariadb-server-core (Debian's stripped mariadbd), chromium (the
#                        HTML report in a real browser), prometheus (promtool), Go (go tool pprof),
#                        debuginfod, systemtap-sdt-dev (USDT notes), sysbench, inferno (from crates.io)
# A database host needs `run` only: none of the test tools.
set -euo pipefail

level=${1:-run}
host=(libbpf1 linux-perf python3 python3-venv python3-pip ca-certificates)
run=("${host[@]}" clang libbpf-dev linux-libc-dev gcc make)
demo=(maven)
test=(g++ binutils bpftool bpftrace mariadb-server-core chromium sysbench prometheus debuginfod systemtap-sdt-dev)
case "$level" in
    host) packages=("${host[@]}") ;;
    run) packages=("${run[@]}") ;;
    demo) packages=("${run[@]}" "${demo[@]}") ;;
    test) packages=("${run[@]}" "${demo[@]}" "${test[@]}")
          # Go: the machines carry one in /usr/local/go; elsewhere Debian's
          command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || packages+=(golang-go) ;;
    *) echo "setup-host.sh: host, run, demo or test, not '$level'" >&2; exit 2 ;;
esac
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

[ "$level" = test ] || exit 0

# uprobes are created through perf events; tracefs is only looked at by the tests
mountpoint -q /sys/kernel/tracing 2>/dev/null || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true

# inferno (FlameGraph's format in Rust): the tests check it reads what we write
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v inferno-flamegraph >/dev/null; then
    if ! command -v cargo >/dev/null; then
        echo "installing: cargo (to build inferno, for the tests)"
        apt-get install -y -qq --no-install-recommends cargo >/dev/null
    fi
    echo "building inferno $INFERNO_VERSION with cargo for the tests (a few minutes, once)"
    cargo install --quiet --locked inferno --version "$INFERNO_VERSION" \
        --bin inferno-flamegraph --bin inferno-diff-folded
fi
