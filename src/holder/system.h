/*
 * system.h — what the holder binary does for envd where Node has no system
 * call for it and a sandbox image may have no tool (docs/holder-protocol.md,
 * "System jobs"): mounting /dev/pts where nothing did, and setting the clock.
 */
#ifndef ENVD_SYSTEM_H
#define ENVD_SYSTEM_H

/*
 * Makes sure devpts is mounted on /dev/pts: mounts it unless it is
 * (creating the directory, and /dev/ptmx as a link to pts/ptmx where /dev has
 * no ptmx node). 0 when it is, -1 with errno when it is not and cannot be
 * (not root, no /dev).
 */
int mount_devpts(void);
/* `envd-holder --set-clock SECONDS[.FRACTION]`: sets CLOCK_REALTIME; prints nothing, exits 0 or 1 with the reason on stderr. */
int set_clock_main(int argc, char **argv);

#endif
