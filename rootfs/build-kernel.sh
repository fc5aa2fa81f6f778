#!/usr/bin/env bash
# Fetches Debian's bookworm kernel and builds a tiny busybox initramfs that loads the
# virtio, ext4 and virtio-net modules, mounts /dev/vda and switches to its systemd.
# Outputs under .cache/guest/kernel-<version>/: vmlinux (uncompressed, booted as PVH by
# qemu -kernel), vmlinuz (fallback), initrd.img.
# Usage: rootfs/build-kernel.sh   (needs apt-get, dpkg, kmod, cpio, busybox-static)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${ENVD_GUEST_CACHE:-$here/../.cache/guest}"
mkdir -p "$cache"

# The uncompressed kernel hides inside the bzImage after its setup code; qemu boots
# that ELF directly through its PVH entry note, skipping the decompressor.
extract_vmlinux() { # bzImage, output
  local magic offset
  for magic in 'fd377a585a00:xz -dc' '28b52ffd:zstd -dc' '1f8b0800:gzip -dc'; do
    offset=$(od -An -v -tx1 -w1 "$1" | tr -d ' \n' | grep -ob "${magic%%:*}" | head -1 | cut -d: -f1) || true
    [ -n "$offset" ] || continue
    tail -c +$((offset / 2 + 1)) "$1" | ${magic#*:} > "$2" 2>/dev/null || true
    if head -c 4 "$2" | od -An -tx1 | grep -q '7f 45 4c 46'; then return 0; fi
  done
  return 1
}

# The metapackage names the current image package, e.g. linux-image-6.1.0-41-amd64.
resolve_package() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }
package=$(resolve_package)
# A fresh machine may have no package lists yet.
[ -n "$package" ] || { apt-get update -qq >/dev/null 2>&1 || true; package=$(resolve_package); }
[ -n "$package" ] || { echo "build-kernel: cannot resolve linux-image-amd64 (run apt-get update)" >&2; exit 1; }
release=${package#linux-image-}
out="$cache/kernel-$release"
# virtio_balloon: free page reporting hands a prepared guest's dropped caches back (issue 41's memory images).
wanted="virtio_pci virtio_blk virtio_net virtio_balloon ext4 crc32c_generic"
# .complete names the modules in the initramfs: a kernel built with fewer is built again.
[ -f "$out/.complete" ] && [ "$(cat "$out/.complete")" = "$wanted" ] && { echo "$out"; exit 0; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -qq "$package" >/dev/null)
dpkg -x "$work"/*.deb "$work/pkg"
modules="$work/pkg/lib/modules/$release"

mkdir -p "$out.partial"
cp "$work/pkg/boot/vmlinuz-$release" "$out.partial/vmlinuz"
extract_vmlinux "$out.partial/vmlinuz" "$out.partial/vmlinux" || rm -f "$out.partial/vmlinux"

# initramfs: busybox, the module closure of what the root disk and network need, /init.
ird="$work/initramfs"
mkdir -p "$ird"/{bin,dev,proc,sys,newroot,lib/modules/"$release"}
cp /bin/busybox "$ird/bin/busybox"
for applet in sh mount umount switch_root modprobe insmod mkdir sleep cat echo; do ln -s busybox "$ird/bin/$applet"; done
depmod -b "$work/pkg" "$release"
for module in $wanted; do
  modprobe -d "$work/pkg" -S "$release" --show-depends "$module" | awk '$1 == "insmod" {print $2}'
done | sort -u | while read -r ko; do
  rel=${ko#"$modules"/}
  mkdir -p "$ird/lib/modules/$release/$(dirname "$rel")"
  cp "$ko" "$ird/lib/modules/$release/$rel"
done
cp "$modules/modules.order" "$modules/modules.builtin" "$modules/modules.builtin.modinfo" "$ird/lib/modules/$release/" 2>/dev/null || true
depmod -b "$ird" "$release"
cat > "$ird/init" <<INIT
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $wanted; do modprobe \$m || echo "initramfs: modprobe \$m failed"; done
# virtio_blk may take a moment to show its disk.
i=0; while [ ! -b /dev/vda ] && [ \$i -lt 100 ]; do sleep 0.05; i=\$((i+1)); done
mount -t ext4 -o rw,noatime /dev/vda /newroot || { echo "initramfs: cannot mount /dev/vda"; exec sh; }
umount /proc /sys
mount --move /dev /newroot/dev 2>/dev/null || umount /dev
exec switch_root /newroot /sbin/init
INIT
chmod +x "$ird/init"
(cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1) > "$out.partial/initrd.img"
echo "$wanted" > "$out.partial/.complete"
rm -rf "$out" && mv "$out.partial" "$out"
echo "$out"
