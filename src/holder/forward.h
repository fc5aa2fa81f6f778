/*
 * forward.h — `envd-holder --forward ENVD_PID BUFFER_BYTES`: the loopback
 * forward's relay. envd accepts a connection on a forward address and hands
 * it here; this process connects to the loopback listener and copies both
 * directions by splice(2) (splice-pump.h), half-closes included, until both
 * have ended or one failed (then both are reset, as an abort is passed on).
 * Bytes never cross envd's event loop: the forward moves them at close to a
 * direct connection's speed (docs/performance.md).
 *
 * The protocol is lines. On stdin, from envd:
 *   `take ID FD INODE ADDRESS PORT` — fd FD of ENVD_PID, a socket of inode
 *   INODE, is a client to connect to ADDRESS (127.x or ::1) port PORT.
 *   `steer ID PID FD INODE ADDRESS PORT` — fd FD of process PID, the TCP
 *   listener of inode INODE, takes new connections to the forward address
 *   ADDRESS port PORT itself, in the kernel (steer.h): no relay for them.
 *   `unsteer ADDRESS PORT` — no longer (its listener closed).
 * On stdout, to envd:
 *   `taken ID` — this process holds the client now; envd closes its own fd.
 *   `refused ID ERRNO` — it could not (no pidfd_getfd, not allowed, no room):
 *   the connection is still envd's.
 *   `closed ID` — the connection ended (either way), its descriptors closed.
 *   `steered ID` / `unsteered ID ERRNO` — the steer was done / was not (no
 *   BPF here, not allowed, the listener gone): that port stays relayed.
 * At most FORWARD_MAX_CONNECTIONS at once; stdin's end (envd gone) ends the
 * process and every connection with it.
 */
#ifndef ENVD_FORWARD_H
#define ENVD_FORWARD_H

/* The most connections one relay holds (envd's MAX_FORWARDED_CONNECTIONS). */
#define FORWARD_MAX_CONNECTIONS 4096

int forward_main(int argc, char **argv);

#endif
