/*
 * probe.h — `envd-holder --probe PATH`: asks the file system mounted at PATH
 * whether it answers, once per byte read from stdin, with statfs(2), which no
 * cache answers (FUSE sends FUSE_STATFS to its daemon, NFS an FSSTAT call to
 * its server), and writes one byte to stdout when it has.
 *
 * envd keeps one per network or FUSE mount it has seen a request for
 * (src/files/mount-guard.ts) and asks before a request touches that mount. A
 * hung mount blocks this process, not one of envd's four thread-pool threads:
 * envd answers the request 503 at its deadline and leaves the probe waiting;
 * its answer, when the mount answers (or is torn down), tells envd the mount
 * is back. FUSE and NFS wait killably, so envd's SIGKILL at shutdown ends it.
 *
 * Exits 0 at EOF on stdin, 1 when a read or write fails, 2 on a usage error.
 * An answer is an answer: statfs's own error is not reported.
 */
#ifndef ENVD_PROBE_H
#define ENVD_PROBE_H

/* `envd-holder --probe PATH`: returns the exit status. */
int probe_main(int argc, char **argv);

#endif
