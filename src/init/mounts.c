// The file systems of a VM booted from a container image, which has no
// systemd or fstab to mount them: each only where nothing is mounted yet, so
// that envd-init also runs under an initramfs or container that did part of it.
#define _GNU_SOURCE
#include "mounts.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

struct mount_point {
  const char *target;
  const char *type;
  unsigned long flags;
  const char *options;
};

static const struct mount_point MOUNTS[] = {
    {"/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL},
    {"/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL},
    {"/dev", "devtmpfs", MS_NOSUID, "mode=0755"},
    // gid 5 is "tty" in every distribution's base files; the holder also mounts one if this failed.
    {"/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "gid=5,mode=0620,ptmxmode=0666"},
    {"/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"},
    {"/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755"},
    {"/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"},
    // One cgroup2 hierarchy, delegation-safe, so that envd can make a subtree per command.
    {"/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, "nsdelegate"},
};

/** Whether something is mounted at `path`: it is on another device than its parent. */
static int is_mount_point(const char *path) {
  char parent[256];
  struct stat self, above;
  if ((size_t)snprintf(parent, sizeof parent, "%s/..", path) >= sizeof parent) return 0;
  if (stat(path, &self) != 0 || stat(parent, &above) != 0) return 0;
  return self.st_dev != above.st_dev;
}

/** The links a devtmpfs lacks and programs expect (shells' <(…), /dev/stdin). */
static void link_dev(void) {
  static const char *const LINKS[][2] = {
      {"/proc/self/fd", "/dev/fd"},
      {"/proc/self/fd/0", "/dev/stdin"},
      {"/proc/self/fd/1", "/dev/stdout"},
      {"/proc/self/fd/2", "/dev/stderr"},
  };
  for (size_t i = 0; i < sizeof LINKS / sizeof *LINKS; i++) {
    if (symlink(LINKS[i][0], LINKS[i][1]) != 0 && errno != EEXIST) log_errno("cannot link %s", LINKS[i][1]);
  }
}

void mount_filesystems(void) {
  for (size_t i = 0; i < sizeof MOUNTS / sizeof *MOUNTS; i++) {
    const struct mount_point *m = &MOUNTS[i];
    if (mkdir(m->target, 0755) != 0 && errno != EEXIST) {
      log_errno("cannot create %s", m->target);
      continue;
    }
    if (is_mount_point(m->target)) continue;
    if (mount(m->type, m->target, m->type, m->flags, m->options) != 0) log_errno("cannot mount %s on %s", m->type, m->target);
  }
  link_dev();
}

void unmount_for_poweroff(void) {
  sync();
  if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY, NULL) != 0) log_errno("cannot remount / read-only");
  sync();
}
