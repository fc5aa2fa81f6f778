/*
 * fail.h — how a holder fails before it is ready: one "error <message>" line
 * on stdout for envd (docs/holder-protocol.md, "Invocation"), the command (if
 * it was forked already) killed and the socket removed, then exit 1.
 *
 * A leaf: the units that create what a failure must not leave behind say so
 * here (fail_kills, fail_unlinks), so fail never calls back up into them.
 */
#ifndef ENVD_FAIL_H
#define ENVD_FAIL_H

#include <sys/types.h>

void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* From now on a failure kills process group `pid` (the command, which leads its own group by then). */
void fail_kills(pid_t pid);
/* From now on a failure unlinks `path` (the socket; the string must outlive the holder's start); NULL: no more. */
void fail_unlinks(const char *path);

#endif
