/*
 * event-check: frames events of every text length from 0 to 70,000 (past the
 * 4- and 5-hex-digit chunk sizes) with frame_event (src/holder/event.c), chunked
 * and not, with ids from 0 to the largest u64, and checks each against the
 * bytes envd writes: the event and id lines, the text, the suffix, and for
 * chunked responses a lower-case hex size line that is exactly the event's
 * length. Prints what failed and exits 1, or exits 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"

#define MAX_TEXT 70000

static unsigned char buf[EVENT_HEAD + MAX_TEXT + EVENT_TAIL];
static char expected[128 + MAX_TEXT];

static int check(size_t len, int stream, int chunked) {
  unsigned char *text = buf + EVENT_HEAD;
  memset(text, 'a' + (int)(len % 26), len);
  size_t framed_len;
  /* Ids as long as they get (u64 max) and as short, so the head room is checked at both ends. */
  struct event_id id = { len % 2 ? 18446744073709551615ULL : 0, len % 3 ? len : 18446744073709551615ULL };
  unsigned char *framed = frame_event(text, len, stream, &id, chunked, &framed_len);
  if (framed < buf || framed + framed_len > buf + sizeof buf) {
    printf("len %zu stream %d chunked %d: framed outside its buffer\n", len, stream, chunked);
    return 1;
  }
  size_t e = 0;
  if (stream == 0) e = (size_t)sprintf(expected, ":\n\n");
  else {
    const char *name = stream == 1 ? "stdout" : "stderr";
    e = (size_t)sprintf(expected, "event: %s\nid: %llu-%llu\ndata: {\"stream\":\"%s\",\"data\":\"", name, (unsigned long long)id.out,
                        (unsigned long long)id.err, name);
    memset(expected + e, 'a' + (int)(len % 26), len);
    e += len;
    e += (size_t)sprintf(expected + e, "\"}\n\n");
  }
  char head[32];
  size_t h = chunked ? (size_t)sprintf(head, "%zx\r\n", e) : 0;
  size_t total = h + e + (chunked ? 2 : 0);
  if (framed_len != total || memcmp(framed, head, h) != 0 || memcmp(framed + h, expected, e) != 0 ||
      (chunked && memcmp(framed + h + e, "\r\n", 2) != 0)) {
    printf("len %zu stream %d chunked %d: framed %zu bytes, expected %zu\n", len, stream, chunked, framed_len, total);
    return 1;
  }
  return 0;
}

int main(void) {
  int failed = 0;
  for (int chunked = 0; chunked <= 1; chunked++) {
    failed |= check(0, 0, chunked);
    for (size_t len = 0; len <= MAX_TEXT; len++) failed |= check(len, 1 + (int)(len % 2), chunked);
  }
  return failed;
}
