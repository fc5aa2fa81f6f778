/*
 * fail.h — how a holder fails before it is ready: one "error <message>" line
 * on stdout for envd (docs/holder-protocol.md, "Invocation"), the command (if
 * it was forked already) killed and the socket removed, then exit 1.
 */
#ifndef ENVD_FAIL_H
#define ENVD_FAIL_H

void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
