// dist/envd: runs envd's Node runtime (runtime/envd-node, the single executable
// application) through the dynamic loader and libraries that ship beside it in
// runtime/lib, so envd needs no library from the root filesystem: it runs the
// same on a musl or busybox-only image, an older glibc and a newer one.
//
// Static and libc-only, like the holder. It finds the runtime beside its own
// file (/proc/self/exe, symlinks resolved): runtime/ in the same directory (the
// build's dist/), else ../lib/envd/runtime (installed: /usr/local/bin/envd and
// /usr/local/lib/envd/runtime, rootfs/install.sh), and drops the loader variables an image may set (LD_PRELOAD,
// LD_LIBRARY_PATH, …: they would load the image's libraries into envd), and
// execs
//   runtime/lib/ld.so (as "envd") --inhibit-cache --library-path runtime/lib --argv0 ARGV0 runtime/envd-node ARGS…
// The pid stays the same (exec), so systemd, envd-init and `ps` see envd.
// Commands never see any of this: envd builds their environment from scratch.
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/** The runtime directory's name, beside the launcher. */
#define RUNTIME "runtime"

/** Exit status when the runtime cannot be run (as a shell's "command not found"). */
#define CANNOT_RUN 127

/** The directory of this executable, symlinks resolved; argv0's when /proc is not mounted. */
static int own_dir(const char *argv0, char *dir, size_t size) {
  char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n > 0) {
    path[n] = '\0';
  } else if (realpath(argv0, path) == NULL) {
    return -1;
  }
  char *slash = strrchr(path, '/');
  if (slash == NULL) return -1;
  *slash = '\0';
  if ((size_t)snprintf(dir, size, "%s", path[0] ? path : "/") >= size) return -1;
  return 0;
}

/**
 * Keeps every environment entry but the LD_* ones: the loader would honour them
 * for envd's own process. The environment comes from the image (envd.env), so
 * an entry may be any bytes: one without "=", or with a name of any length, is
 * judged by its first three bytes alone. One pass over a copy, no unsetenv
 * (which matches whole names and would leave such entries in place).
 */
static int drop_loader_variables(void) {
  extern char **environ;
  size_t count = 0;
  while (environ[count] != NULL) count++;
  char **kept = calloc(count + 1, sizeof *kept);
  if (kept == NULL) return -1;
  size_t n = 0;
  for (size_t i = 0; i < count; i++) {
    if (strncmp(environ[i], "LD_", 3) != 0) kept[n++] = environ[i];
  }
  kept[n] = NULL;
  environ = kept;
  return 0;
}

/** Where the runtime is, relative to the launcher's directory, in the order tried. */
static const char *const RUNTIME_PLACES[] = {RUNTIME, "../lib/envd/" RUNTIME};

/** Fills loader, libs and node for the first place whose loader exists; -1 if none does. */
static int find_runtime(const char *dir, char *loader, char *libs, char *node, size_t size) {
  for (size_t i = 0; i < sizeof RUNTIME_PLACES / sizeof *RUNTIME_PLACES; i++) {
    const char *place = RUNTIME_PLACES[i];
    if ((size_t)snprintf(loader, size, "%s/%s/lib/ld.so", dir, place) >= size ||
        (size_t)snprintf(libs, size, "%s/%s/lib", dir, place) >= size ||
        (size_t)snprintf(node, size, "%s/%s/envd-node", dir, place) >= size) {
      return -1;
    }
    if (access(loader, X_OK) == 0) return 0;
  }
  return -1;
}

int main(int argc, char **argv) {
  char dir[PATH_MAX], loader[PATH_MAX], libs[PATH_MAX], node[PATH_MAX];
  if (own_dir(argv[0], dir, sizeof dir) != 0) {
    fprintf(stderr, "envd: cannot find its own directory (no /proc/self/exe, and %s does not resolve)\n", argv[0]);
    return CANNOT_RUN;
  }
  if (find_runtime(dir, loader, libs, node, sizeof loader) != 0) {
    fprintf(stderr, "envd: its runtime is missing: neither %s/" RUNTIME "/lib/ld.so nor %s/../lib/envd/" RUNTIME "/lib/ld.so exists\n", dir, dir);
    return CANNOT_RUN;
  }
  if (drop_loader_variables() != 0) return CANNOT_RUN;

  // loader, 6 options and their values, the program, the arguments, NULL.
  char **args = calloc((size_t)argc + 8, sizeof *args);
  if (args == NULL) return CANNOT_RUN;
  int i = 0;
  // The loader's own argv[0] is what /proc/PID/cmdline starts with (ps, pidof, systemd):
  // "envd", as it was when envd was one file. Node's process.title cannot reach it.
  args[i++] = "envd";
  args[i++] = "--inhibit-cache"; // never the image's /etc/ld.so.cache
  args[i++] = "--library-path";
  args[i++] = libs;
  args[i++] = "--argv0";
  args[i++] = argv[0];
  args[i++] = node;
  for (int k = 1; k < argc; k++) args[i++] = argv[k];
  args[i] = NULL;
  execv(loader, args);
  fprintf(stderr, "envd: cannot run %s: %s\n", loader, strerror(errno));
  return CANNOT_RUN;
}
