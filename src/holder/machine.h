/*
 * machine.h — what the holder binary does for envd's snapshot and fork
 * support (docs/holder-protocol.md, "System jobs"; docs/api.md, "Snapshots"),
 * where Node has no system call for it and an image may have no tool. Each is
 * a one-shot job run as `envd-holder --JOB ...`: it prints nothing, exits 0,
 * or 1 (the call failed) / 2 (bad arguments) with the reason on stderr. Run
 * as child processes so that a call that blocks (sync(2) on a slow disk,
 * FIFREEZE waiting for writers) never blocks envd's event loop.
 */
#ifndef ENVD_MACHINE_H
#define ENVD_MACHINE_H

/* `--sync`: sync(2), every filesystem's dirty data to its disk. */
int sync_main(int argc, char **argv);
/* `--fsfreeze MOUNTPOINT` / `--fsthaw MOUNTPOINT`: FIFREEZE / FITHAW on the filesystem mounted there. */
int fsfreeze_main(int argc, char **argv);
int fsthaw_main(int argc, char **argv);
/*
 * `--add-entropy`: reads 32..ENTROPY_MAX_BYTES bytes from stdin (never argv,
 * which /proc shows to every user) and credits them to the kernel's pool
 * (RNDADDENTROPY on /dev/random), all bits counted, then reseeds the
 * kernel's generator from the pool at once (RNDRESEEDCRNG).
 */
int add_entropy_main(int argc, char **argv);
/* `--set-hostname NAME`: sethostname(2). */
int set_hostname_main(int argc, char **argv);

#endif
