#!/bin/sh
# Installs envd into a root filesystem directory: see rootfs/install.mjs, which does the work.
# The root is an image's, so an attacker's: every path in it is resolved inside it, never
# followed to this host, which a shell's cp, mv and ln cannot promise.
# Usage: rootfs/install.sh ROOTFS_DIR [--default-user USER] [--init auto|systemd|openrc|busybox|envd-init]
# Without --default-user: `user` if ROOTFS_DIR/etc/passwd has it, else root (printed).
# Exit status 2 for bad input (no such root, no /etc/passwd, a user missing from it).
here="$(cd "$(dirname "$0")" && pwd)"
exec "${NODE:-node}" "$here/install.mjs" "$@"
