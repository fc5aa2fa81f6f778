/*
 * sockets.h — the guest's listening sockets for envd's port watch (docs/api.md,
 * "Ports"), read with NETLINK_SOCK_DIAG, which Node cannot open.
 *
 *   envd-holder --watch-sockets INTERVAL_MS MAX_SOCKETS
 *
 * Every INTERVAL_MS (stretched so the dumps stay under 1 % of a core) it
 * dumps the listening TCP sockets and the bound, unconnected UDP sockets of
 * its network namespace, and writes the whole set to stdout whenever it
 * differs from the last one written (the first always):
 *
 *   tcp 127.0.0.1 8080 4242 1000      PROTOCOL ADDRESS PORT INODE UID
 *   udp :: 5353 4243 0
 *   .                                 the end of one set
 *
 * TCP v4, TCP v6, UDP v4, UDP v6 in that order, at most MAX_SOCKETS lines a
 * set (the rest are not written). ADDRESS is inet_ntop's text. It exits 1
 * with the reason on stderr when netlink cannot be used (envd then reads
 * /proc/net itself), 2 on bad arguments, and dies with envd
 * (PR_SET_PDEATHSIG) or when stdout is closed.
 */
#ifndef ENVD_SOCKETS_H
#define ENVD_SOCKETS_H

int watch_sockets_main(int argc, char **argv);

#endif
