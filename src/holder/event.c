/* event.c — one output event as envd's response carries it (event.h). */
#include "event.h"

#include <stdio.h>
#include <string.h>

static const char *const names[3] = { "", "stdout", "stderr" };
static const char suffix[] = "\"}\n\n";
static const char keep_alive[] = ":\n\n"; /* as envd writes one */

unsigned char *frame_event(unsigned char *text, size_t len, int stream, const struct event_id *id, int chunked, size_t *framed_len) {
  char prefix[EVENT_HEAD];
  int pre = 0;
  size_t suf = 0;
  if (stream) {
    pre = snprintf(prefix, sizeof prefix, "event: %s\nid: %llu-%llu\ndata: {\"stream\":\"%s\",\"data\":\"", names[stream],
                   (unsigned long long)id->out, (unsigned long long)id->err, names[stream]);
    suf = sizeof suffix - 1;
  } else {
    len = sizeof keep_alive - 1;
    memcpy(text, keep_alive, len);
  }
  unsigned char *start = text - pre;
  memcpy(start, prefix, (size_t)pre);
  memcpy(text + len, suffix, suf);
  unsigned char *end = text + len + suf;
  if (chunked) {
    size_t event = (size_t)pre + len + suf;
    char head[16];
    int n = 0;
    for (size_t v = event; n == 0 || v; v >>= 4) head[n++] = "0123456789abcdef"[v & 15];
    start -= n + 2;
    for (int i = 0; i < n; i++) start[i] = (unsigned char)head[n - 1 - i];
    start[n] = '\r';
    start[n + 1] = '\n';
    *end++ = '\r';
    *end++ = '\n';
  }
  *framed_len = (size_t)(end - start);
  return start;
}
