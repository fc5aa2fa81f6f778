#ifndef ENVD_INIT_MOUNTS_H
#define ENVD_INIT_MOUNTS_H

/** Mounts what a booted image needs and has not mounted yet; creates /dev's links. */
void mount_filesystems(void);

/** Writes what is unwritten and remounts / read-only, before power-off. */
void unmount_for_poweroff(void);

#endif
