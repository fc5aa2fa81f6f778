/* event.c — one output event as envd's response carries it (event.h). */
#include "event.h"

#include <string.h>

static const char prefix[3][48] = {
  "",
  "event: stdout\ndata: {\"stream\":\"stdout\",\"data\":\"",
  "event: stderr\ndata: {\"stream\":\"stderr\",\"data\":\"",
};
static const char suffix[] = "\"}\n\n";
static const char keep_alive[] = ":\n\n"; /* as envd writes one */

unsigned char *frame_event(unsigned char *text, size_t len, int stream, int chunked, size_t *framed_len) {
  size_t pre = stream ? strlen(prefix[stream]) : 0;
  size_t suf = stream ? sizeof suffix - 1 : 0;
  if (!stream) {
    len = sizeof keep_alive - 1;
    memcpy(text, keep_alive, len);
  }
  unsigned char *start = text - pre;
  memcpy(start, prefix[stream], pre);
  memcpy(text + len, suffix, suf);
  unsigned char *end = text + len + suf;
  if (chunked) {
    size_t event = pre + len + suf;
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
