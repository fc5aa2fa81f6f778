/*
 * receive.h — `envd-holder --receive BYTES EARLY`: a raw upload's body into
 * the temporary file (fd 4): first the EARLY bytes envd's HTTP parser had
 * already read (from stdin, written at 0), then BYTES more moved from the
 * client's socket (fd 3) by splice(2); then the file is flushed to disk.
 *
 * envd hands a large PUT /files/raw with a Content-Length to this mode after
 * its HTTP parser has read the headers (and maybe the body's first bytes):
 * the kernel then moves the body socket -> pipe -> page cache, and no byte of
 * it is copied through envd's JavaScript heap. Writeback is started every
 * 4 MiB (sync_file_range), so the final fsync overlaps the transfer instead
 * of following it.
 *
 * It prints one line on stdout and exits: `ok N` (N bytes written, 0), or
 * `short N` (the client closed or reset after N bytes, 1), `idle N` (nothing
 * came for 60 s, 1), `error ERRNO N` (the file could not take them; 1).
 * The socket is non-blocking (its flags are shared with envd): poll(2) waits.
 */
#ifndef ENVD_RECEIVE_H
#define ENVD_RECEIVE_H

/* `envd-holder --receive BYTES EARLY`: prints one line and returns the exit status. */
int receive_main(int argc, char **argv);

#endif
