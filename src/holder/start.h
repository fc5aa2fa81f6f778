/*
 * start.h — a holder's start (docs/holder-protocol.md, "Invocation"): its
 * descriptors and signals made safe, the kept output's files, the socket, the
 * pipes or terminal, the command forked, the pid file and the `ready` line.
 */
#ifndef ENVD_START_H
#define ENVD_START_H

struct holder;

/* Returns once `ready` is written and the holder has let go of envd's pipes; fails the holder on any error. */
void start(struct holder *h);

#endif
