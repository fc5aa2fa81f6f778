/*
 * util.h — small system helpers every job of the binary uses: whole writes,
 * the monotonic clock, closing inherited descriptors, start times from /proc.
 */
#ifndef ENVD_UTIL_H
#define ENVD_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* For blocking fds (files, the final flush): a partial write is continued, EINTR retried. 0, or -1 with errno. */
int write_all(int fd, const void *buf, size_t n);
/* Milliseconds of CLOCK_MONOTONIC. */
uint64_t now_ms(void);
/* Closes every fd from `first` up (close_range, or one by one on kernels before 5.9). */
void close_fds_from(int first);
/* Adds O_NONBLOCK to an fd's status flags; 0, or -1 with errno. */
int set_nonblocking(int fd);
/* Field 22 of /proc/<pid>/stat: with the pid it names one process for good. 0, or -1. */
int read_start_time(pid_t pid, unsigned long long *out);
/* The errno's name ("EMFILE"), for messages that must say which failure it was. */
const char *errno_name(int err);

#endif
