#!/usr/bin/env bash
# Builds the second guest image: no glibc and no systemd, "Alpine-like", from Debian's
# busybox-static and musl packages (apt-get download + dpkg -x: no chroot, no Docker).
# The tree is turned into a template by rootfs/image-to-template.mjs like any image,
# so envd-init becomes its /sbin/init. Outputs (under .cache/guest/):
#   busybox-base-<key>/   the tree before envd (packages fetched once)
#   busybox.ext4          the template image for qemu
# Users: root; user (1000) with the supplementary groups devs (2000) and ops (2001).
# Usage: rootfs/build-busybox-image.sh   (as root; needs apt-get, dpkg, e2fsprogs, node)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${ENVD_GUEST_CACHE:-$here/../.cache/guest}"
mkdir -p "$cache"
packages="busybox-static musl"
key=$( (cat "$0"; echo "$packages") | sha256sum | cut -c1-16)
base="$cache/busybox-base-$key"

if [ ! -f "$base/.complete" ]; then
  rm -rf "$base" "$base.partial"
  root="$base.partial"
  mkdir -p "$root" "$cache/debs"
  # A fresh machine may have no package lists yet.
  (cd "$cache/debs" && { apt-get download -q $packages >/dev/null 2>&1 || { apt-get update -qq && apt-get download -q $packages >/dev/null; }; })
  for package in $packages; do dpkg -x "$(ls "$cache/debs/${package}"_*.deb | head -1)" "$root"; done
  mkdir -p "$root"/{bin,sbin,etc,root,home/user,tmp,proc,sys,dev,run,var/log,usr/bin,usr/sbin}
  # Every applet as a link to the one static binary, as Alpine has them.
  "$root/bin/busybox" --list | while read -r applet; do
    [ "$applet" = busybox ] || [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
  done
  cat > "$root/etc/passwd" <<'USERS'
root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:user:/home/user:/bin/sh
USERS
  cat > "$root/etc/group" <<'GROUPS'
root:x:0:
tty:x:5:
user:x:1000:
devs:x:2000:user
ops:x:2001:user
GROUPS
  chown 1000:1000 "$root/home/user"
  chmod 1777 "$root/tmp"
  echo envd-busybox > "$root/etc/hostname"
  printf '127.0.0.1 localhost\n' > "$root/etc/hosts"
  # No glibc anywhere: the musl loader is the only one.
  if find "$root" -name 'libc.so.6' -o -name 'ld-linux-x86-64.so.2' | grep -q .; then
    echo "build-busybox-image: glibc found in the tree" >&2
    exit 1
  fi
  touch "$root/.complete"
  mv "$root" "$base"
  find "$cache" -maxdepth 1 -name 'busybox-base-*' ! -name "busybox-base-$key" -exec rm -rf {} +
fi

rm -rf "$cache/busybox-rootfs"
cp -a "$base" "$cache/busybox-rootfs"
rm -f "$cache/busybox-rootfs/.complete"
node "$here/image-to-template.mjs" "$cache/busybox-rootfs" "$cache/busybox.ext4" --default-user user --size-mib 512 >&2
rm -rf "$cache/busybox-rootfs"
