#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void log_line(const char *format, ...) {
  va_list args;
  va_start(args, format);
  fputs("envd-init: ", stderr);
  vfprintf(stderr, format, args);
  fputc('\n', stderr);
  va_end(args);
}

void log_errno(const char *format, ...) {
  int saved = errno;
  va_list args;
  va_start(args, format);
  fputs("envd-init: ", stderr);
  vfprintf(stderr, format, args);
  fprintf(stderr, ": %s\n", strerror(saved));
  va_end(args);
}
