#ifndef ENVD_INIT_LOG_H
#define ENVD_INIT_LOG_H

/** One line on the console, "envd-init: …". */
void log_line(const char *format, ...) __attribute__((format(printf, 1, 2)));

/** The same with ": <strerror(errno)>" at the end. */
void log_errno(const char *format, ...) __attribute__((format(printf, 1, 2)));

#endif
