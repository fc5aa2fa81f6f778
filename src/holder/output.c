/* output.c — reading the command's output (output.h). */
#define _GNU_SOURCE
#include "output.h"

#include <errno.h>
#include <unistd.h>

#include "direct.h"
#include "holder.h"
#include "json-text.h"
#include "kept.h"
#include "live.h"
#include "outgoing.h"
#include "util.h"

uint64_t text_offset(const struct holder *h, int stream) {
  return output_offset(&h->kept, stream) - utf8_pending(&h->output.text_state[stream]);
}

void seed_text_decoders(struct output *o) {
  for (int st = STREAM_STDOUT; st <= STREAM_STDERR; st++) utf8_seed(&o->text_state[st], o->tail[st], o->tail_len[st]);
}

/* The last 3 bytes of a stream: enough to tell a character still incomplete at its end. */
static void remember_tail(struct output *o, int stream, const unsigned char *data, size_t n) {
  unsigned char *t = o->tail[stream];
  for (size_t i = n > 3 ? n - 3 : 0; i < n; i++) {
    if (o->tail_len[stream] == 3) {
      t[0] = t[1];
      t[1] = t[2];
      o->tail_len[stream] = 2;
    }
    t[o->tail_len[stream]++] = data[i];
  }
}

void end_direct(struct holder *h, int reason) {
  direct_close(&h->live.direct);
  h->live.mode = SEND_TEXT;
  queue_direct_ended(&h->live, log_end(&h->kept), reason, text_offset(h, STREAM_STDOUT), text_offset(h, STREAM_STDERR));
}

void direct_written(struct holder *h, int written) {
  if (written < 0) end_direct(h, DIRECT_ENDED_FAILED);
  else if (written > 0 && h->live.direct.closing) end_direct(h, DIRECT_ENDED_OFF);
}

/* The text of `len` bytes at direct_text() as the next event, with the text offsets after it. */
static void send_direct(struct holder *h, int stream, size_t len) {
  direct_written(h, direct_send(&h->live.direct, stream, len, text_offset(h, STREAM_STDOUT), text_offset(h, STREAM_STDERR)));
}

/*
 * A chunk for a LIVE TEXT client: decoded and escaped in pieces of at most
 * TEXT_MAX, each piece kept as its own frame before its TEXT goes out, so
 * every TEXT's logEnd is a frame boundary a replay can stop at.
 */
static void keep_and_send_text(struct holder *h, int stream, size_t n) {
  struct output *o = &h->output;
  unsigned char *data = o->read_buf + FRAME_HEADER, *text = o->text_buf + TEXT_HEADER;
  uint64_t before = output_offset(&h->kept, stream) - n; /* the chunk is counted already */
  size_t at = 0;
  while (at < n) {
    size_t used;
    size_t len = json_text(&o->text_state[stream], data + at, n - at, text, TEXT_MAX, &used);
    /* The header goes into the 5 bytes in front of the piece: bytes already escaped, or read_buf's own. */
    keep_chunk(&h->kept, stream, data + at, used);
    at += used;
    queue_text(&h->live, stream, log_end(&h->kept), before + at - utf8_pending(&o->text_state[stream]), text, len);
  }
}

/* A chunk for the lent socket: one read is always one event (DIRECT_TEXT_CAP fits its text), kept before it goes out. */
static void keep_and_write_direct(struct holder *h, int stream, size_t n) {
  unsigned char *data = h->output.read_buf + FRAME_HEADER;
  size_t used;
  size_t len = json_text(&h->output.text_state[stream], data, n, direct_text(&h->live.direct), DIRECT_TEXT_CAP, &used);
  keep_chunk(&h->kept, stream, data, used);
  send_direct(h, stream, len);
}

/* How much to read: a CHUNK, or for TEXT a TEXT_READ_MAX and no more than the ring can take at 6 bytes of text per byte. */
static size_t read_size(const struct live *l) {
  if (l->mode == SEND_DIRECT) return DIRECT_READ;
  if (l->mode != SEND_TEXT) return CHUNK;
  size_t room = ring_room(l), headers = TEXT_PIECES_MAX * DATA_HEADER;
  size_t fits = room > headers ? (room - headers) / JSON_TEXT_MAX_GROWTH : 0;
  return fits < TEXT_READ_MAX ? fits : TEXT_READ_MAX;
}

/* A character left incomplete by the end of the stream is one U+FFFD, as a decoder's end() gives. */
static void end_text(struct holder *h, int stream) {
  struct live *l = &h->live;
  if (l->client_fd < 0 || (l->mode != SEND_TEXT && l->mode != SEND_DIRECT) || !h->output.text_state[stream].needed) return;
  utf8_reset(&h->output.text_state[stream]);
  if (l->mode == SEND_TEXT) {
    unsigned char *text = h->output.text_buf + TEXT_HEADER;
    queue_text(l, stream, log_end(&h->kept), text_offset(h, stream), text, put_replacement(text));
  } else {
    send_direct(h, stream, put_replacement(direct_text(&l->direct)));
  }
}

int read_source(struct holder *h, struct source *s) {
  struct live *l = &h->live;
  unsigned char *data = h->output.read_buf + FRAME_HEADER;
  size_t want = read_size(l);
  if (want == 0) return READ_HELD; /* not reached: sources are read only while the ring is at or below LIVE_HIGH */
  ssize_t n = read(s->fd, data, want);
  if (n < 0 && errno == EINTR) return READ_HELD;
  /* Empty for now. On a pty master this also means the kernel's flip buffers were flushed to it first (n_tty). */
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return READ_EMPTY;
  if (n <= 0) {
    end_text(h, s->stream);
    /* EOF; EIO is how a pty master says no process holds the slave any more. */
    s->eof = 1;
    if (s->fd != h->command.pty_fd) close(s->fd);
    s->fd = -1;
    return READ_END;
  }
  remember_tail(&h->output, s->stream, data, (size_t)n);
  count_output(&h->kept, s->stream, (size_t)n);
  if (l->client_fd >= 0 && l->mode == SEND_TEXT) {
    keep_and_send_text(h, s->stream, (size_t)n);
  } else if (l->client_fd >= 0 && l->mode == SEND_DIRECT) {
    keep_and_write_direct(h, s->stream, (size_t)n);
  } else {
    keep_chunk(&h->kept, s->stream, data, (size_t)n);
    if (l->client_fd >= 0 && l->mode == SEND_DATA)
      queue_data(l, s->stream, log_end(&h->kept), output_offset(&h->kept, s->stream), data, (size_t)n);
  }
  return READ_DATA;
}

/*
 * Back-pressure: with LIVE on and the client behind, the command's output waits in its pipe; so it does
 * while a lent socket is not yet to be written (DIRECT_WAIT) or has not taken the last event.
 */
int output_held(struct holder *h) {
  struct live *l = &h->live;
  if (l->held_until) {
    if (now_ms() < l->held_until) return 1;
    l->held_until = 0;
  }
  if (l->client_fd < 0) return 0;
  if (l->mode == SEND_DIRECT_WAIT || (l->mode == SEND_DIRECT && l->direct.left > 0)) return 1;
  return l->mode != SEND_NOTHING && unsent_bytes(l) > LIVE_HIGH;
}
