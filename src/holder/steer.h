/*
 * steer.h — the loopback forward in the kernel: a BPF sk_lookup program
 * attached to this network namespace hands a new TCP connection to a forward
 * address:port straight to the user's own loopback listener, so there is no
 * relay, no second connection, and the server sees the client's real address.
 * (The relay, forward.h, stays the path for whatever is not steered.)
 *
 * The program looks the connection's {family, local port, local address} up in
 * a SOCKHASH; a hit is assigned with bpf_sk_assign, a miss (every address and
 * port envd did not insert, every UDP lookup) passes on untouched to the next
 * program and the kernel's own lookup. Only this process holds the map, the
 * program and the link (nothing is pinned in bpffs): when it exits the link is
 * detached and the steering is gone from the namespace. The kernel drops a
 * listener from the map itself when its socket closes. Needs Linux >= 5.10
 * (sk_lookup, listeners in a SOCKHASH) and CAP_BPF + CAP_NET_ADMIN (root).
 */
#ifndef ENVD_STEER_H
#define ENVD_STEER_H

/* The most forward address:port keys steered at once; an insert past it fails (E2BIG) and that port is relayed. */
#define STEER_MAX_KEYS 4096

/*
 * Steers new TCP connections to ADDRESS (the forward address) port PORT into
 * the listener LISTENER (a copy of the user's fd; the caller closes it). Sets
 * up the map, program and link at the first call; a setup that failed fails
 * every call after it with the same error. 0, or -1 with errno.
 */
int steer_insert(const char *address, unsigned port, int listener);
/* Stops steering ADDRESS:PORT (nothing if it is not steered). */
void steer_delete(const char *address, unsigned port);

#endif
