#!/usr/bin/env bash
# Installs envd into a root filesystem directory: the single executable, its systemd
# unit (enabled by symlink, so no systemctl or chroot is needed) and its settings.
# Usage: rootfs/install.sh ROOTFS_DIR [--default-user USER]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="${1:?usage: install.sh ROOTFS_DIR [--default-user USER]}"
shift
default_user=user
while [ $# -gt 0 ]; do
  case "$1" in
    --default-user) default_user="${2:?--default-user needs a value}"; shift 2 ;;
    *) echo "install.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
binary="$here/../dist/envd"
[ -x "$binary" ] || { echo "install.sh: $binary missing; run node build.mjs first" >&2; exit 1; }
[ -d "$root/etc" ] || { echo "install.sh: $root does not look like a root filesystem" >&2; exit 1; }

install -D -m 0755 "$binary" "$root/usr/local/bin/envd"
install -D -m 0644 "$here/envd.service" "$root/etc/systemd/system/envd.service"
# The token file is on /run (tmpfs): absent at boot, so envd starts uninitialised and the
# orchestrator's first POST /init sets the token and writes it there (0600). An envd that
# systemd restarts reads it back, so /init never reopens; a memory snapshot keeps it, a
# reboot clears it. The orchestrator may also write it before envd starts.
install -d -m 0755 "$root/etc/envd"
printf 'ENVD_DEFAULT_USER=%s\nENVD_LOG_LEVEL=info\nENVD_ACCESS_TOKEN_FILE=/run/envd/token\n' "$default_user" > "$root/etc/envd/envd.env"
chmod 0644 "$root/etc/envd/envd.env"
install -d "$root/etc/systemd/system/multi-user.target.wants"
ln -sfn /etc/systemd/system/envd.service "$root/etc/systemd/system/multi-user.target.wants/envd.service"
