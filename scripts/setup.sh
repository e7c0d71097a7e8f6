#!/usr/bin/env bash
# Install what ebpfkit needs on a Debian/Ubuntu machine, as root. Safe to run again.
#   scripts/setup.sh            the engine and tools: clang, libbpf, bpftool, a venv with ebpfkit
#   scripts/setup.sh --test     also what the test suite needs (QEMU and a kernel for the VM tests)
#   scripts/setup.sh --bench    also the alternatives the benchmarks compare against (BCC, bpftrace)
#   scripts/setup.sh --matrix   also what BCC's tools trace in the compatibility matrix (docs/bcc-compat.md)
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0 want_bench=0 want_matrix=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    --bench) want_bench=1 ;;
    --matrix) want_matrix=1 ;;
    *) echo "usage: $0 [--test] [--bench] [--matrix]" >&2; exit 2 ;;
  esac
done

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/setup.sh installs system packages: run it as root (sudo)." >&2
  exit 4
fi

# what ebpfkit needs to run and to build (scripts/packages.sh says why each is there)
source scripts/packages.sh
packages=("${runtime_packages[@]}" "${build_packages[@]}")
# Tests: gcc also builds small test binaries; QEMU, two Debian kernels with their headers (6.1,
# and 6.12: the newest, so the VM tests' default; tests name both where the kernel decides the
# path: sockmap links, tcx) and busybox are what the VM harness boots; nginx and wrk rebuild the
# sockmap load-balancer experiment; prometheus scrapes `ebpfkit exporter` in its tests; memleak's
# tests run their leaking program under jemalloc and tcmalloc (LD_PRELOAD) to test those presets;
# detect's reverse-shell corpus uses socat, ncat and netcat (and its benign corpus socat, curl, and
# ssh to an sshd of its own on a loopback port: openssh-server; its service is never started);
# `ebpfkit bcc run` is tested on BCC's own tools, unmodified, as bpfcc-tools installs them, on
# what they trace: Ruby (libruby has USDT probes: rubycalls) and MariaDB's server and client
# (dbslower; only the -core packages, which start no service: the test starts its own server).
# tc's tests build a node of namespaces whose forward hook nftables counts (nftables), and measure
# its rate limits in the VM with iperf3. pahole encodes BTF from DWARF, as `--btf` does with a
# debug package's vmlinux. zstd unpacks 6.12's vmlinux, whose types every program compiles against.
[ "$want_test" = 1 ] && packages+=(make libc6-dev qemu-system-x86 linux-image-amd64 linux-headers-amd64
                                   linux-image-6.12-amd64 linux-headers-6.12-amd64
                                   busybox-static nginx-light wrk prometheus
                                   libjemalloc2 libtcmalloc-minimal4 socat ncat netcat-openbsd curl
                                   openssh-server bpfcc-tools ruby mariadb-server-core mariadb-client-core
                                   nftables iperf3 pahole zstd)
if [ "$want_bench" = 1 ]; then
  # gcc (above) builds the benchmark's syscall loop. BCC compiles against kernel headers: the running
  # kernel's if the archive has them, else the distribution's (fine for tracepoint programs).
  # sockperf/iperf3/wrk/nginx measure socket acceleration; trafgen (netsniff-ng), xdp-tools
  # and nftables are what the XDP filter is compared against; node_exporter is the reference
  # exporter `ebpfkit exporter` is measured against; ping (iputils-ping) is what pingtrace's RTT is
  # compared with, and iperf3 its cost on other traffic.
  packages+=(bpftrace python3-bpfcc bpfcc-tools sockperf iperf3 wrk nginx-light netsniff-ng xdp-tools nftables
             prometheus-node-exporter iputils-ping)
  if apt-cache show "linux-headers-$(uname -r)" >/dev/null 2>&1; then
    packages+=("linux-headers-$(uname -r)")
  else
    packages+=("linux-headers-$(dpkg --print-architecture)")
  fi
fi

# The compatibility matrix runs every tool bpfcc-tools installs against what it traces (the test
# packages above, and): PHP's CLI, built with its USDT probes (php*); a JDK for the java* tools'
# JVM, which runs a source file (so with its compiler).
[ "$want_matrix" = 1 ] && packages+=(bpfcc-tools ruby mariadb-server-core mariadb-client-core php-cli
                                     default-jdk-headless)

install_packages "${packages[@]}"

# Tests also boot Debian 11's 5.10 (the oldest kernel ebpfkit supports), unpacked under
# /var/lib/ebpfkit/kernels by a private apt configuration: the host's sources and /boot untouched.
# The benchmarks also compare start-up there with BCC (`startup.py --vm 5.10`), which compiles
# against that kernel's own headers: --bench adds them beside it (10 MB of packages, 80 MB
# unpacked); the tests need none, so --test, what CI runs, stays without them
if [ "$want_bench" = 1 ]; then
  bash scripts/debian-kernel.sh --headers bullseye >/dev/null
elif [ "$want_test" = 1 ]; then
  bash scripts/debian-kernel.sh bullseye >/dev/null
fi

if [ "$want_test" = 1 ] || [ "$want_bench" = 1 ]; then
  # the servers these packages bring are the tests' and benchmarks' to start, each on a loopback
  # port of its own: none may listen on the machine's addresses after a reboot either
  for service in ssh nginx prometheus prometheus-node-exporter; do
    systemctl disable "$service" >/dev/null 2>&1 || true
    update-rc.d "$service" disable >/dev/null 2>&1 || true
  done
fi

if [ "$want_bench" = 1 ]; then
  # without /lib/modules/$(uname -r)/build, BCC is pointed at the installed headers through
  # $BCC_KERNEL_SOURCE (a merged symlink tree for Debian's split packages); /lib/modules is not touched
  echo "== kernel headers for BCC: $(/usr/bin/python3 benchmarks/bcc_headers.py || true)"
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv with $($python --version)"
  "$python" -m venv .venv
fi
extras="notebook"
[ "$want_test" = 1 ] && extras="test,notebook"
echo "== installing ebpfkit[$extras] into .venv"
# compat mode: the editable install is a plain path in a .pth file; the default mode's
# import-hook finder costs every `ebpfkit` start ~15-20 ms of imports (pathlib, re, ...)
.venv/bin/pip install -q --disable-pip-version-check -e ".[$extras]" --config-settings editable_mode=compat
# the install also compiled every program into ebpfkit/programs/prebuilt (setup.py; from the
# object cache when nothing changed), where the engine looks when clang is missing. pip hides
# that step's output, so say here whether it worked
unbuilt=$(.venv/bin/python -c 'from ebpfkit.engine.prebuilt import missing; print(" ".join(missing()))')
if [ -n "$unbuilt" ]; then
  echo "== WARNING: no prebuilt CO-RE object for: $unbuilt (.venv/bin/ebpfkit build says why)" >&2
else
  echo "== prebuilt CO-RE objects in ebpfkit/programs/prebuilt"
fi
# an editable install leaves byte-compiling to the first run (or to nobody, under
# PYTHONDONTWRITEBYTECODE); do it now, as a regular install would, for fast starts
.venv/bin/python -m compileall -q -j 0 ebpfkit >/dev/null
ln -sf "$PWD/.venv/bin/ebpfkit" /usr/local/bin/ebpfkit
echo "== ready: $(.venv/bin/ebpfkit --version)"
