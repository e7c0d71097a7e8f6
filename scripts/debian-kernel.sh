#!/usr/bin/env bash
# Fetch and unpack another Debian release's kernel for the VM harness, as root:
#   scripts/debian-kernel.sh bullseye        Debian 11's 5.10 (what scripts/setup.sh --test fetches)
#   scripts/debian-kernel.sh trixie          Debian 13's
#   scripts/debian-kernel.sh --headers bullseye   also its headers (what scripts/setup.sh --bench fetches)
# The kernel lands in /var/lib/ebpfkit/kernels/<release>/ (boot/vmlinuz-*, boot/config-*,
# lib/modules/*), where `ebpfkit vm` finds it (`--kernel 5.10`); nothing is installed with dpkg,
# and the host's apt sources, lists, /boot and /lib/modules are not touched: a private apt
# configuration (its own sources list, lists and cache under /var/lib/ebpfkit/apt-SUITE)
# reads the suite from the same Debian mirror the host uses (or $EBPFKIT_DEBIAN_MIRROR).
# --headers adds the kernel's headers, linux-headers-<release> and the -common package it
# includes, in the same root (usr/src/linux-headers-<release>, usr/src/linux-headers-*-common),
# for BCC in a guest running that kernel (benchmarks/bcc_headers.py finds them there): not its
# lib/modules/<release>/build link, which would point at the host's /usr/src, nor linux-kbuild
# (scripts and tools for building modules: BCC reads headers only).
# Safe to run again: a kernel (and headers) already unpacked is kept. Prints the release on its
# last line. Exit status: 2 usage, 3 something missing (mirror, keyring, package), 4 not root.
set -euo pipefail

suite="" headers=0
for arg in "$@"; do
  case "$arg" in
    --headers) headers=1 ;;
    -*) suite="" && break ;;
    *) if [ -n "$suite" ]; then suite="" && break; fi; suite=$arg ;;
  esac
done
if [ -z "$suite" ] || [ "$#" -ne $((1 + headers)) ]; then
  echo "usage: $0 [--headers] SUITE   (a Debian suite: bullseye, trixie, ...)" >&2
  exit 2
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "$0 unpacks into /var/lib/ebpfkit: run it as root (sudo)." >&2
  exit 4
fi

kernels=${EBPFKIT_KERNELS_DIR:-/var/lib/ebpfkit/kernels}
state=/var/lib/ebpfkit/apt-$suite
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
arch=$(dpkg --print-architecture)

# the host's Debian mirror: the URI of its own release's main archive
mirror=${EBPFKIT_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  mirror=$(apt-get indextargets --format '$(CODENAME) $(REPO_URI)' 'Identifier: Packages' 2>/dev/null |
           awk -v s="$codename" '$1 == s { print $2; exit }')
fi
if [ -z "$mirror" ]; then
  echo "no Debian mirror in this machine's apt sources: set EBPFKIT_DEBIAN_MIRROR to one" >&2
  exit 3
fi
if [ ! -r "$keyring" ]; then
  echo "$keyring is missing: apt-get install debian-archive-keyring" >&2
  exit 3
fi

mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$state/parts" "$kernels"
: > "$state/status"  # nothing installed, as far as this configuration knows: the suite's own versions win
echo "deb [signed-by=$keyring] $mirror $suite main" > "$state/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$state/sources.list" -o "Dir::Etc::SourceParts=$state/parts"
          -o "Dir::State::Lists=$state/lists" -o "Dir::State::status=$state/status" -o "Dir::Cache=$state/cache"
          -o "APT::Architecture=$arch" -o "Debug::NoLocking=1")
apt-get "${apt_opts[@]}" update -qq

# the suite's kernel: what its linux-image-ARCH metapackage depends on, unsigned (the same
# image; the signed one is only a different package for Secure Boot)
image=$(apt-cache "${apt_opts[@]}" depends "linux-image-$arch" | awk '/Depends: linux-image-/ { print $2; exit }')
image=${image%-unsigned}
release=${image#linux-image-}
if [ -z "$release" ] || [ "$release" = "$image" ]; then
  echo "no kernel found in $suite's linux-image-$arch" >&2
  exit 3
fi
root=$kernels/$release
work=$(mktemp -d)
trap 'rm -rf "$work" "$root.headers.partial"' EXIT
download() {  # PACKAGE... into $work (apt's sandbox user could not write the private temporary directory)
  (cd "$work" && apt-get "${apt_opts[@]}" -o APT::Sandbox::User=root download -qq "$@")
}

if [ -f "$root/boot/vmlinuz-$release" ] && [ -f "$root/lib/modules/$release/modules.dep" ]; then
  echo "== $suite's kernel is in $root"
else
  echo "== fetching $image-unsigned from $suite"
  download "$image-unsigned"
  rm -rf "$root.partial"
  dpkg-deb -x "$work"/*.deb "$root.partial"
  rm -f "$work"/*.deb
  # modules.dep is written by the package's postinst, which nothing runs here
  depmod -b "$root.partial" "$release"
  mv "$root.partial" "$root"
  echo "== $suite's kernel unpacked in $root"
fi

if [ "$headers" = 1 ]; then
  # linux-headers-<release> has the generated headers and config; the rest is in the -common
  # package its Makefile includes (by its /usr/src path: bcc_headers.py maps it into this root)
  common=$(apt-cache "${apt_opts[@]}" depends "linux-headers-$release" 2>/dev/null |
           awk '/Depends: linux-headers-.*-common/ { print $2; exit }')
  if [ -z "$common" ]; then
    echo "no linux-headers-$release (or the -common package it depends on) in $suite" >&2
    exit 3
  fi
  src=$root/usr/src
  if [ -f "$src/linux-headers-$release/include/generated/autoconf.h" ] &&
     [ -f "$src/$common/include/linux/kconfig.h" ]; then
    echo "== $suite's kernel headers are in $src"
  else
    echo "== fetching linux-headers-$release and $common from $suite"
    download "linux-headers-$release" "$common"
    staging=$root.headers.partial  # (a .partial name: ebpfkit vm does not take it for a kernel)
    rm -rf "$staging"
    for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$staging"; done
    mkdir -p "$src"
    for dir in "linux-headers-$release" "$common"; do
      rm -rf "${src:?}/$dir"
      mv "$staging/usr/src/$dir" "$src/$dir"
    done
    echo "== $suite's kernel headers unpacked in $src"
  fi
fi
echo "$release"
