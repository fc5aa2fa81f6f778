/*
 * sizes.h — every fixed buffer of a command's holder, and the invariants
 * between them, each checked by the compiler: the holder never allocates, so
 * these sizes are its whole memory, and a change to one that breaks another
 * fails the build instead of losing a byte (docs/holder-protocol.md, "Flow
 * control", "TEXT", "Direct output").
 */
#ifndef ENVD_SIZES_H
#define ENVD_SIZES_H

/* One read(2) of the command's output: kept as one frame, sent as one DATA. */
#define CHUNK 65536
/* A kept frame's header in front of its bytes: u8 stream | u32 LE length (kept.h). */
#define FRAME_HEADER 5

/* A live-channel message's header: u8 type | u32 LE payload length. */
#define MESSAGE_HEADER 5
/* The largest payload envd may send (a STDIN's bytes and id): larger closes the connection (protocol.ts MAX_MESSAGE_PAYLOAD). */
#define MAX_IN_PAYLOAD 65536
/* The largest payload envd takes from a holder (protocol.ts MAX_HOLDER_PAYLOAD), and a kept frame's (MAX_FRAME). */
#define ENVD_MAX_PAYLOAD (17 + 65536)
#define ENVD_MAX_FRAME 65536
/* The client's input buffer: one whole message always fits after compaction. */
#define IN_BUF (MESSAGE_HEADER + MAX_IN_PAYLOAD)

/* Unsent bytes above which the command's output is no longer read while a client follows it. */
#define LIVE_HIGH (256 * 1024)
/* A DATA's message header and its own (u8 stream, u64 logEnd, u64 stream offset), in front of the bytes. */
#define DATA_HEADER (MESSAGE_HEADER + 17)
/* A TEXT's own header (u8 stream, u64 logEnd, u64 text offset), in front of its text. */
#define TEXT_HEADER 17
/* The largest text of one TEXT: envd reads 64 KiB at a time. */
#define TEXT_MAX 65536

/*
 * json_text's bound (json-text.h): one step writes at most 6 bytes ("\u00xx"
 * for a control byte); n bytes become at most 6n, plus the U+FFFD (3 bytes)
 * that ends a character left incomplete by the previous call. In
 * JSON_TEXT_ROOM(n) bytes of room a call takes all n bytes; in
 * JSON_TEXT_ROOM(1) it takes at least one.
 */
#define JSON_TEXT_MAX_GROWTH 6
#define JSON_TEXT_ROOM(n) ((n) * JSON_TEXT_MAX_GROWTH + 3)

/* A TEXT client's read: 1/16 less than a CHUNK, so typical text (a few escapes per line) goes out as one TEXT. */
#define TEXT_READ_MAX (CHUNK - CHUNK / 16)
/* The TEXT messages one read may become, counted as headers of room when a read's size is chosen (output.c). */
#define TEXT_PIECES_MAX 8
/* The most TEXTs n bytes become: every TEXT but the last is cut only when its next step might not fit. */
#define TEXT_PIECES(n) (JSON_TEXT_ROOM(n) / (TEXT_MAX - JSON_TEXT_MAX_GROWTH + 1) + 1)
/* Room in the ring for the small replies (ACK, SYNC, REAPED, DIRECT_ENDED, EXIT) that follow a full read. */
#define RING_SLACK 4096
/*
 * The ring of unsent client output. Output is read only while at most
 * LIVE_HIGH is unsent, and a read becomes one DATA; as TEXT a read is cut to
 * what the ring can take rather than the ring sized for 6 x CHUNK: a ring
 * that wraps touches all of its pages.
 */
#define RING_CAP (LIVE_HIGH + DATA_HEADER + CHUNK + RING_SLACK)

/* One read while the holder writes to a lent socket: it always becomes one event. */
#define DIRECT_READ 61440
/* Room for the text of a whole direct read: json_text takes every byte of it. */
#define DIRECT_TEXT_CAP JSON_TEXT_ROOM(DIRECT_READ)
/* Room in front of an event's text (the chunk size line, the event's lines and prefix), and after it (suffix, CRLF). */
#define EVENT_HEAD 128
#define EVENT_TAIL 8
/* The longest of those lines: either stream (both names have 6 letters), both ids the largest u64. */
#define EVENT_PREFIX_MAX (sizeof "event: stdout\nid: 18446744073709551615-18446744073709551615\ndata: {\"stream\":\"stdout\",\"data\":\"" - 1)
#define EVENT_SUFFIX_MAX (sizeof "\"}\n\n" - 1)
/* The lent socket's event buffer: head room, a direct read's text, tail room. */
#define DIRECT_BUF (EVENT_HEAD + DIRECT_TEXT_CAP + EVENT_TAIL)

/* DATA and TEXT headers are the same size, so the read-size arithmetic counts either as DATA_HEADER. */
_Static_assert(MESSAGE_HEADER + TEXT_HEADER == DATA_HEADER, "a TEXT's headers are a DATA's");
/* Output is read only at or below LIVE_HIGH unsent: a whole read as one DATA then fits in the ring. */
_Static_assert(RING_CAP >= LIVE_HIGH + DATA_HEADER + CHUNK, "the ring takes one read's DATA on top of LIVE_HIGH");
/* The small replies that may follow before the client reads: REAPED, DIRECT_ENDED, EXIT and one ACK or SYNC. */
_Static_assert(RING_SLACK >= 4 * (MESSAGE_HEADER + 25), "the ring takes the replies after a full read");
/* json_text makes progress in a TEXT's room (each call takes a byte), so a read's text is cut into pieces. */
_Static_assert(TEXT_MAX >= JSON_TEXT_ROOM(1), "json_text takes at least one byte in TEXT_MAX of room");
/*
 * A TEXT read is cut to (room - TEXT_PIECES_MAX headers) / 6 bytes (output.c): its text (6n + 3 at most)
 * and its pieces' headers then fit, as long as the pieces leave one header's room for those 3 bytes.
 */
_Static_assert(TEXT_PIECES(TEXT_READ_MAX) < TEXT_PIECES_MAX, "a TEXT read's pieces fit in the room counted for them");
/* At LIVE_HIGH a TEXT client still gets reads of 10 KiB or more: the ring's room above it is not too tight. */
_Static_assert((RING_CAP - LIVE_HIGH - TEXT_PIECES_MAX * DATA_HEADER) / JSON_TEXT_MAX_GROWTH >= 10 * 1024,
               "a TEXT read at LIVE_HIGH is at least 10 KiB");
/* The read buffer holds a CHUNK; a direct read and a TEXT read are smaller. */
_Static_assert(DIRECT_READ <= CHUNK && TEXT_READ_MAX <= CHUNK, "every read fits the read buffer");
/* One direct read is always one event: its text, and the U+FFFD that may end a stream, fit DIRECT_TEXT_CAP. */
_Static_assert(DIRECT_TEXT_CAP >= JSON_TEXT_ROOM(DIRECT_READ), "a direct read's text fits one event");
/* The chunk size line (hex of at most DIRECT_BUF, 6 digits, CRLF) and the longest prefix fit in front of the text. */
_Static_assert(DIRECT_BUF < 0x1000000 && EVENT_PREFIX_MAX + 6 + 2 <= EVENT_HEAD, "an event's head fits EVENT_HEAD");
/* The suffix and the chunk's CRLF fit after it; a keep-alive comment (3 bytes) fits where the text goes. */
_Static_assert(EVENT_SUFFIX_MAX + 2 <= EVENT_TAIL && DIRECT_TEXT_CAP >= 3, "an event's tail fits EVENT_TAIL");
/* envd takes every message and frame the holder writes: a DATA of a whole read, a TEXT of TEXT_MAX, a CHUNK's frame. */
_Static_assert(DATA_HEADER - MESSAGE_HEADER + CHUNK <= ENVD_MAX_PAYLOAD && TEXT_HEADER + TEXT_MAX <= ENVD_MAX_PAYLOAD && CHUNK <= ENVD_MAX_FRAME,
               "envd takes what the holder sends");
/* A whole message always fits the input buffer once what was handled is moved out. */
_Static_assert(IN_BUF >= MESSAGE_HEADER + MAX_IN_PAYLOAD, "a whole message fits the input buffer");

#endif
