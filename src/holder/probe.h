/*
 * probe.h — `envd-holder --probe PATH`: asks the file system mounted at PATH
 * whether it answers, with statfs(2), which no cache answers (FUSE sends
 * FUSE_STATFS to its daemon, NFS an FSSTAT call to its server).
 *
 * envd runs it before a file request touches a network or FUSE mount
 * (src/files/mount-guard.ts). A hung mount blocks this process, not one of
 * envd's four thread-pool threads: envd answers the request 503 at its
 * deadline and leaves the probe waiting; it exits when the mount answers (or
 * is torn down), and envd takes that as the mount's recovery. FUSE and NFS
 * wait killably, so envd's SIGKILL at shutdown ends it.
 *
 * Exits 0 when statfs returned (with an error or not: an answer is an
 * answer), 2 on a usage error.
 */
#ifndef ENVD_PROBE_H
#define ENVD_PROBE_H

/* `envd-holder --probe PATH`: returns the exit status. */
int probe_main(int argc, char **argv);

#endif
