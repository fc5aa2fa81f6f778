#!/usr/bin/env bash
# Builds the guest root filesystem and its ext4 image from Debian bookworm, with envd
# installed as a systemd service. No loop mounts: the image is made with mkfs.ext4 -d.
# Outputs (under .cache/guest/, reused while their inputs are unchanged):
#   base-<key>/        the Debian tree before envd (the slow part, ~1-3 min)
#   rootfs/            base + envd, ready for systemd-nspawn
#   image.ext4         the same tree as an ext4 disk image for qemu
# Usage: rootfs/build-image.sh   (as root; needs mmdebstrap and e2fsprogs)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${ENVD_GUEST_CACHE:-$here/../.cache/guest}"
mkdir -p "$cache"

packages=systemd,systemd-sysv,udev,dbus,iproute2,util-linux,coreutils,procps,bash,passwd,login
# The key covers everything that shapes the base tree: this script and the package list.
key=$( (cat "$0"; echo "$packages") | sha256sum | cut -c1-16)
base="$cache/base-$key"

if [ ! -f "$base/.complete" ]; then
  rm -rf "$base" "$base.partial"
  echo "build-image: mmdebstrap bookworm minbase -> $base" >&2
  mmdebstrap --quiet --variant=minbase --include="$packages" \
    --customize-hook='chroot "$1" useradd -m -s /bin/bash user' \
    --customize-hook='chroot "$1" passwd -l user >/dev/null' \
    --customize-hook='chroot "$1" passwd -l root >/dev/null' \
    bookworm "$base.partial"
  root="$base.partial"
  echo envd-guest > "$root/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 envd-guest\n' > "$root/etc/hosts"
  # qemu's user-mode network: the guest is 10.0.2.15, the host side 10.0.2.2.
  # Matched on the virtio driver so the same tree under systemd-nspawn leaves the
  # container's veth (addressed by whoever made it) alone.
  mkdir -p "$root/etc/systemd/network"
  cat > "$root/etc/systemd/network/10-qemu-user.network" <<'NET'
[Match]
Type=ether
Driver=virtio_net

[Network]
Address=10.0.2.15/24
Gateway=10.0.2.2
LinkLocalAddressing=no
IPv6AcceptRA=no
NET
  ln -sfn /lib/systemd/system/systemd-networkd.service "$root/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
  # Nothing in the guest waits for the network: envd listens on 0.0.0.0 at once.
  ln -sfn /dev/null "$root/etc/systemd/system/systemd-networkd-wait-online.service"
  # A sandbox has no console login to offer and no need for these at boot.
  for unit in getty@tty1.service serial-getty@ttyS0.service systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer e2scrub_reap.service; do
    ln -sfn /dev/null "$root/etc/systemd/system/$unit"
  done
  # The guest's clock is set by envd's /init, not by the RTC's opinion of local time.
  printf '0.0 0 0\n0\nUTC\n' > "$root/etc/adjtime"
  # The initramfs mounts the root read-write; nothing else to mount or wait for.
  : > "$root/etc/fstab"
  rm -rf "$root/var/cache/apt/"* "$root/var/lib/apt/lists/"* "$root/usr/share/doc/"* "$root/usr/share/man/"*
  touch "$root/.complete"
  mv "$root" "$base"
  # Older bases are never reused once the key changed.
  find "$cache" -maxdepth 1 -name 'base-*' ! -name "base-$key" -exec rm -rf {} +
fi

# envd changes often and costs seconds: always installed afresh over a copy of the base.
rm -rf "$cache/rootfs"
cp -a "$base" "$cache/rootfs"
rm -f "$cache/rootfs/.complete"
"$here/install.sh" "$cache/rootfs" --default-user user

size_mib=$(( $(du -sm "$cache/rootfs" | cut -f1) + 1536 ))
rm -f "$cache/image.ext4.partial"
mkfs.ext4 -q -L envd-root -d "$cache/rootfs" "$cache/image.ext4.partial" "${size_mib}M"
mv "$cache/image.ext4.partial" "$cache/image.ext4"
echo "build-image: $cache/rootfs and $cache/image.ext4 (${size_mib} MiB)" >&2
