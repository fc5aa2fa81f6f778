/* output.c — reading the command's output (output.h). */
#define _GNU_SOURCE
#include "output.h"

#include <errno.h>
#include <unistd.h>

#include "direct.h"
#include "json-text.h"
#include "kept.h"
#include "live.h"
#include "util.h"
#include "wire.h"

/* For TEXT: each stream's decoder, and its last bytes to seed the decoder when LIVE goes on. */
static struct utf8_state text_state[3];
static unsigned char tail[3][3];
static size_t tail_len[3];

/* The read buffer keeps a frame header's room in front of the data, so a frame goes to its segment with one write. */
static unsigned char rbuf[FRAME_HEADER + CHUNK];

uint64_t text_offset(int stream) { return output_offset(stream) - utf8_pending(&text_state[stream]); }

void seed_text_decoders(void) {
  for (int st = STREAM_STDOUT; st <= STREAM_STDERR; st++) utf8_seed(&text_state[st], tail[st], tail_len[st]);
}

/* The last 3 bytes of a stream: enough to tell a character still incomplete at its end. */
static void remember_tail(int stream, const unsigned char *data, size_t n) {
  unsigned char *t = tail[stream];
  for (size_t i = n > 3 ? n - 3 : 0; i < n; i++) {
    if (tail_len[stream] == 3) {
      t[0] = t[1];
      t[1] = t[2];
      tail_len[stream] = 2;
    }
    t[tail_len[stream]++] = data[i];
  }
}

/*
 * A chunk for a LIVE TEXT client: decoded and escaped in pieces of at most
 * TEXT_MAX, each piece kept as its own frame before its TEXT goes out, so
 * every TEXT's logEnd is a frame boundary a replay can stop at.
 */
static void keep_and_send_text(int stream, size_t n) {
  unsigned char *data = rbuf + FRAME_HEADER;
  uint64_t before = output_offset(stream) - n; /* the chunk is counted already */
  size_t at = 0;
  while (at < n) {
    size_t used;
    size_t len = json_text(&text_state[stream], data + at, n - at, text_buffer(), TEXT_MAX, &used);
    /* The header goes into the 5 bytes in front of the piece: bytes already escaped, or rbuf's own. */
    keep_chunk(stream, data + at, used);
    at += used;
    queue_text(stream, len, before + at - utf8_pending(&text_state[stream]));
  }
}

/* A chunk for the lent socket: one read is always one event (DIRECT_TEXT_CAP fits its text), kept before it goes out. */
static void keep_and_write_direct(int stream, size_t n) {
  size_t used;
  size_t len = json_text(&text_state[stream], rbuf + FRAME_HEADER, n, direct_text(), DIRECT_TEXT_CAP, &used);
  keep_chunk(stream, rbuf + FRAME_HEADER, used);
  send_direct(stream, len, text_offset(STREAM_STDOUT), text_offset(STREAM_STDERR));
}

/* How much to read: a CHUNK, or for TEXT 1/16 less (typical text, a few escapes per line, then goes out as one
   message) and no more than the ring can take at 6 bytes of text per byte (>= 10 KiB at LIVE_HIGH). */
static size_t read_size(void) {
  if (live.mode == SEND_DIRECT) return DIRECT_READ;
  if (live.mode != SEND_TEXT) return CHUNK;
  size_t room = ring_room(), headers = 8 * DATA_HEADER;
  size_t fits = room > headers ? (room - headers) / JSON_TEXT_MAX_GROWTH : 0;
  return fits < CHUNK - CHUNK / 16 ? fits : CHUNK - CHUNK / 16;
}

/* A character left incomplete by the end of the stream is one U+FFFD, as a decoder's end() gives. */
static void end_text(int stream) {
  if (live.client_fd < 0 || (live.mode != SEND_TEXT && live.mode != SEND_DIRECT) || !text_state[stream].needed) return;
  utf8_reset(&text_state[stream]);
  if (live.mode == SEND_TEXT) queue_text(stream, put_replacement(text_buffer()), text_offset(stream));
  else send_direct(stream, put_replacement(direct_text()), text_offset(STREAM_STDOUT), text_offset(STREAM_STDERR));
}

int read_source(struct source *s) {
  size_t want = read_size();
  if (want == 0) return READ_HELD; /* not reached: sources are read only while the ring is at or below LIVE_HIGH */
  ssize_t n = read(s->fd, rbuf + FRAME_HEADER, want);
  if (n < 0 && errno == EINTR) return READ_HELD;
  /* Empty for now. On a pty master this also means the kernel's flip buffers were flushed to it first (n_tty). */
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return READ_EMPTY;
  if (n <= 0) {
    end_text(s->stream);
    /* EOF; EIO is how a pty master says no process holds the slave any more. */
    s->eof = 1;
    if (s->fd != command.pty_fd) close(s->fd);
    s->fd = -1;
    return READ_END;
  }
  remember_tail(s->stream, rbuf + FRAME_HEADER, (size_t)n);
  count_output(s->stream, (size_t)n);
  if (live.client_fd >= 0 && live.mode == SEND_TEXT) {
    keep_and_send_text(s->stream, (size_t)n);
  } else if (live.client_fd >= 0 && live.mode == SEND_DIRECT) {
    keep_and_write_direct(s->stream, (size_t)n);
  } else {
    keep_chunk(s->stream, rbuf + FRAME_HEADER, (size_t)n);
    if (live.client_fd >= 0 && live.mode == SEND_DATA) {
      unsigned char h[17];
      h[0] = (unsigned char)s->stream;
      put_u64(h + 1, log_end());
      put_u64(h + 9, output_offset(s->stream));
      queue(MSG_DATA, h, sizeof h, rbuf + FRAME_HEADER, (size_t)n);
    }
  }
  return READ_DATA;
}

/*
 * Back-pressure: with LIVE on and the client behind, the command's output waits in its pipe; so it does
 * while a lent socket is not yet to be written (DIRECT_WAIT) or has not taken the last event.
 */
int output_held(void) {
  if (live.held_until) {
    if (now_ms() < live.held_until) return 1;
    live.held_until = 0;
  }
  if (live.client_fd < 0) return 0;
  if (live.mode == SEND_DIRECT_WAIT || (live.mode == SEND_DIRECT && direct_unsent() > 0)) return 1;
  return live.mode != SEND_NOTHING && unsent_bytes() > LIVE_HIGH;
}
