#!/usr/bin/env bash
# Installs envd into a root filesystem directory: the launcher as /usr/local/bin/envd,
# its runtime (Node, the loader and libraries it links) and envd-init under
# /usr/local/lib/envd, its settings, and the way the image starts it (--init):
#   systemd    the unit, enabled by symlink (no systemctl or chroot needed)
#   openrc     /etc/init.d/envd, added to the default runlevel by symlink
#   busybox    a respawn line in /etc/inittab (busybox init restarts envd)
#   envd-init  /sbin/init -> envd-init (the image's own /sbin/init kept as /sbin/init.image)
#   auto       (default) systemd if the image has it, else OpenRC, else envd-init
# Usage: rootfs/install.sh ROOTFS_DIR [--default-user USER] [--init auto|systemd|openrc|busybox|envd-init]
# Exit status 2 for bad input (no such root, no /etc/passwd, a user missing from it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
usage="usage: install.sh ROOTFS_DIR [--default-user USER] [--init auto|systemd|openrc|busybox|envd-init]"
fail() { echo "install.sh: $*" >&2; exit 2; }
[ $# -ge 1 ] || fail "$usage"
root="$1"
shift
default_user=user
init=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --default-user) [ $# -ge 2 ] || fail "--default-user needs a value"; default_user="$2"; shift 2 ;;
    --init) [ $# -ge 2 ] || fail "--init needs a value"; init="$2"; shift 2 ;;
    *) fail "unknown option $1; $usage" ;;
  esac
done
dist="$here/../dist"
for file in envd envd-init runtime/envd-node runtime/lib/ld.so; do
  [ -e "$dist/$file" ] || { echo "install.sh: $dist/$file missing; run node build.mjs first" >&2; exit 1; }
done
[ -d "$root" ] || fail "$root is not a directory"
[ -f "$root/etc/passwd" ] || fail "$root has no /etc/passwd: envd needs it to know the image's users"
grep -q "^${default_user}:" "$root/etc/passwd" || fail "the default user $default_user is not in $root/etc/passwd"

has_systemd() { [ -x "$root/lib/systemd/systemd" ] || [ -x "$root/usr/lib/systemd/systemd" ]; }
has_openrc() { [ -x "$root/sbin/openrc" ] || [ -x "$root/sbin/openrc-run" ] || [ -x "$root/usr/sbin/openrc" ]; }
if [ "$init" = auto ]; then
  if has_systemd; then init=systemd; elif has_openrc; then init=openrc; else init=envd-init; fi
fi

lib="$root/usr/local/lib/envd"
install -D -m 0755 "$dist/envd" "$root/usr/local/bin/envd"
install -d -m 0755 "$lib"
rm -rf "$lib/runtime.new" && cp -a "$dist/runtime" "$lib/runtime.new"
rm -f "$lib/runtime.new"/*.inputs
rm -rf "$lib/runtime" && mv "$lib/runtime.new" "$lib/runtime"
install -m 0755 "$dist/envd-init" "$lib/envd-init"
# The token file is on /run (tmpfs): absent at boot, so envd starts uninitialised and the
# orchestrator's first POST /init sets the token and writes it there (0600). An envd that
# is restarted reads it back, so /init never reopens; a memory snapshot keeps it, a
# reboot clears it. The orchestrator may also write it before envd starts.
install -d -m 0755 "$root/etc/envd"
printf 'ENVD_DEFAULT_USER=%s\nENVD_LOG_LEVEL=info\nENVD_ACCESS_TOKEN_FILE=/run/envd/token\n' "$default_user" > "$root/etc/envd/envd.env"
chmod 0644 "$root/etc/envd/envd.env"

case "$init" in
  systemd)
    install -D -m 0644 "$here/envd.service" "$root/etc/systemd/system/envd.service"
    install -d "$root/etc/systemd/system/multi-user.target.wants"
    ln -sfn /etc/systemd/system/envd.service "$root/etc/systemd/system/multi-user.target.wants/envd.service"
    ;;
  openrc)
    install -D -m 0755 "$here/envd.openrc" "$root/etc/init.d/envd"
    install -d "$root/etc/runlevels/default"
    ln -sfn /etc/init.d/envd "$root/etc/runlevels/default/envd"
    ;;
  busybox)
    # busybox init mounts nothing itself: envd-init's mounts come from the image's rcS.
    line='::respawn:/usr/local/bin/envd'
    touch "$root/etc/inittab"
    grep -qxF "$line" "$root/etc/inittab" || printf '%s\n' "$line" >> "$root/etc/inittab"
    ;;
  envd-init)
    install -d "$root/sbin"
    if [ -e "$root/sbin/init" ] || [ -L "$root/sbin/init" ]; then
      [ "$(readlink "$root/sbin/init")" = /usr/local/lib/envd/envd-init ] || mv -f "$root/sbin/init" "$root/sbin/init.image"
    fi
    ln -sfn /usr/local/lib/envd/envd-init "$root/sbin/init"
    ;;
  *) fail "unknown --init $init; $usage" ;;
esac
echo "install.sh: envd installed into $root, started by $init"
