#ifndef ENVD_INIT_ENVD_PROCESS_H
#define ENVD_INIT_ENVD_PROCESS_H

#include <sys/types.h>

/**
 * Starts envd (beside envd-init, else the installed /usr/local/bin/envd) in a
 * session of its own, with /etc/envd/envd.env's settings in its environment and
 * the OOM killer told to spare it, as the systemd unit does. Returns its pid, or
 * -1 when it could not be started.
 */
pid_t start_envd(void);

#endif
