/* json-text.c — output as the text of a JSON string (json-text.h). */
#include "json-text.h"

#include <string.h>

void utf8_reset(struct utf8_state *d) {
  d->code_point = 0;
  d->needed = d->seen = 0;
  d->lower = 0x80;
  d->upper = 0xBF;
}

size_t put_replacement(unsigned char *o) {
  o[0] = 0xEF;
  o[1] = 0xBF;
  o[2] = 0xBD;
  return 3;
}

static size_t put_utf8(unsigned char *o, uint32_t cp) {
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | cp >> 6);
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | cp >> 12);
    o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | cp >> 18);
  o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

/* An ASCII byte as JSON.stringify writes it: short escapes, \u00xx (lower-case hex) for other controls. */
static size_t put_ascii(unsigned char *o, unsigned char b) {
  static const char hex[] = "0123456789abcdef";
  if (b >= 0x20 && b != '"' && b != '\\') {
    o[0] = b;
    return 1;
  }
  o[0] = '\\';
  switch (b) {
  case '"': o[1] = '"'; return 2;
  case '\\': o[1] = '\\'; return 2;
  case '\b': o[1] = 'b'; return 2;
  case '\f': o[1] = 'f'; return 2;
  case '\n': o[1] = 'n'; return 2;
  case '\r': o[1] = 'r'; return 2;
  case '\t': o[1] = 't'; return 2;
  default:
    o[1] = 'u';
    o[2] = '0';
    o[3] = '0';
    o[4] = (unsigned char)hex[b >> 4];
    o[5] = (unsigned char)hex[b & 0xF];
    return 6;
  }
}

/* True for the bytes that pass through unchanged: printable ASCII but the quote and the backslash. */
static int plain_ascii(unsigned char b) { return b >= 0x20 && b < 0x80 && b != '"' && b != '\\'; }

/*
 * How many of the next bytes (at most `max`) pass through unchanged, 8 at a
 * time while it can: a word has no byte to escape when none is >= 0x80,
 * < 0x20, '"' or '\\' (the "has a zero byte" bit trick on w, w - 0x20 and w
 * xor each character). Plain text is most of any output, and this loop was
 * most of the holder's CPU time under a stream.
 */
static size_t plain_run(const unsigned char *in, size_t max) {
  const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
  size_t run = 0;
  while (run + 8 <= max) {
    uint64_t w;
    memcpy(&w, in + run, 8);
    uint64_t quote = w ^ (ones * '"'), slash = w ^ (ones * '\\');
    uint64_t special = (w | ((w - ones * 0x20) & ~w) | ((quote - ones) & ~quote) | ((slash - ones) & ~slash)) & highs;
    if (special) break;
    run += 8;
  }
  while (run < max && plain_ascii(in[run])) run++;
  return run;
}

/*
 * With cap >= JSON_TEXT_ROOM(n) every byte is taken (*used == n). A step
 * writes at most 6 bytes and takes its byte, except the U+FFFD that ends an
 * invalid sequence: it takes nothing, but follows bytes of that sequence that
 * wrote nothing. Those bytes were taken by this call, except for a sequence
 * carried over from the previous call, whose U+FFFD (3 bytes) can only come
 * first. So after i bytes the output is at most 6 * i + 3, and while i < n
 * there are still the 6 bytes of room the next step needs.
 */
size_t json_text(struct utf8_state *d, const unsigned char *in, size_t n, unsigned char *out, size_t cap, size_t *used) {
  size_t i = 0, o = 0;
  while (i < n && o + JSON_TEXT_MAX_GROWTH <= cap) {
    unsigned char b = in[i];
    if (d->needed == 0) {
      if (plain_ascii(b)) {
        /* The common case: a run of plain text, copied as it is (one byte out per byte in). */
        size_t room = cap - o;
        size_t run = plain_run(in + i, room < n - i ? room : n - i);
        memcpy(out + o, in + i, run);
        o += run;
        i += run;
        continue;
      }
      i++;
      if (b < 0x80) o += put_ascii(out + o, b);
      else if (b >= 0xC2 && b <= 0xDF) { d->needed = 1; d->code_point = b & 0x1F; }
      else if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) d->lower = 0xA0;
        if (b == 0xED) d->upper = 0x9F;
        d->needed = 2;
        d->code_point = b & 0x0F;
      } else if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) d->lower = 0x90;
        if (b == 0xF4) d->upper = 0x8F;
        d->needed = 3;
        d->code_point = b & 0x07;
      } else o += put_replacement(out + o);
      continue;
    }
    if (b < d->lower || b > d->upper) {
      /* The sequence so far is one maximal subpart: one U+FFFD; b starts afresh (not consumed). */
      utf8_reset(d);
      o += put_replacement(out + o);
      continue;
    }
    i++;
    d->lower = 0x80;
    d->upper = 0xBF;
    d->code_point = d->code_point << 6 | (b & 0x3F);
    if (++d->seen == d->needed) {
      o += put_utf8(out + o, d->code_point);
      utf8_reset(d);
    }
  }
  *used = i;
  return o;
}

/*
 * The decoder's state after a stream whose last bytes (at most 3) are `tail`:
 * a character still incomplete there can only have started at the last byte
 * that does not continue one, and the decoder starts afresh at such a byte
 * whatever came before it.
 */
void utf8_seed(struct utf8_state *d, const unsigned char *tail, size_t n) {
  utf8_reset(d);
  size_t start = n;
  while (start > 0 && (tail[start - 1] & 0xC0) == 0x80) start--;
  if (start == 0) return; /* only continuation bytes (or nothing): no character is pending */
  unsigned char scratch[JSON_TEXT_ROOM(3)];
  size_t at = start - 1, used;
  while (at < n) {
    json_text(d, tail + at, n - at, scratch, sizeof scratch, &used);
    at += used;
  }
}
