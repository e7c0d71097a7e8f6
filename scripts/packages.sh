# The Debian packages ebpfkit needs, in one place: sourced by scripts/setup.sh (the README's
# install) and scripts/image.sh (the container image, deploy/Containerfile), so both install
# the same things.

# Running ebpfkit: libbpf1 loads the programs; python3 and python3-venv hold ebpfkit and its
# Python dependencies apart from the system's; bpftool and iproute2 are for inspection.
runtime_packages=(libbpf1 python3 python3-venv bpftool iproute2)
# Building it: clang/llvm compile the BPF C (at run time, or once into the prebuilt CO-RE
# objects a wheel carries); libbpf-dev has the bpf/*.h headers the programs include; gcc and
# python3-dev build its one C module (the kernel type walk a cold start needs; without them it
# runs in Python); pip and ca-certificates fetch the Python dependencies.
build_packages=(clang llvm libbpf-dev python3-pip python3-dev gcc ca-certificates)

# install_packages PKG...: apt-get install those not installed yet
install_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ "${#missing[@]}" -gt 0 ] || return 0
  echo "== installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # packages like nginx start their service on install; nothing of ours may listen on the
  # machine's addresses, so forbid service starts for the duration (policy-rc.d, exit 101)
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
