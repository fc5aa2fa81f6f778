/*
 * relay.h — `envd-holder --relay BYTES EARLY`: a large archive upload's body
 * passed on to envd (fd 4) and hashed on the way: first the EARLY bytes
 * envd's HTTP parser had already read (from stdin), then BYTES more read from
 * the client's socket (fd 3).
 *
 * envd extracts the archive from what arrives on fd 4; the sha256 its answer
 * carries is computed here, on another CPU, instead of on envd's main thread,
 * where it was a quarter of an upload's time (docs/performance.md). envd uses
 * this mode only where the CPU has SHA extensions and there is a second CPU.
 *
 * It prints one line on stdout and exits: `ok N SHA256` (0), or `short N`
 * (the client closed or reset after N bytes, 1), `idle N` (nothing came for
 * 60 s, 1), `error ERRNO N` (envd stopped reading fd 4, or a read failed; 1).
 * The socket is non-blocking (its flags are shared with envd): poll(2) waits.
 * A full fd 4 blocks the relay, and so the client: envd's read-ahead bounds
 * what is in flight.
 */
#ifndef ENVD_RELAY_H
#define ENVD_RELAY_H

/* `envd-holder --relay BYTES EARLY`: prints one line and returns the exit status. */
int relay_main(int argc, char **argv);

#endif
