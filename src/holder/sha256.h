/*
 * sha256.h — SHA-256 (FIPS 180-4) for the relay of an archive upload
 * (relay.h), which hashes the body on its own CPU so that envd's main thread
 * does not have to. Blocks go through the CPU's SHA extensions (SHA-NI) where
 * it has them, ~1.8 GB/s here, and through portable C elsewhere (an older CPU,
 * or qemu's TCG), ~0.3 GB/s.
 */
#ifndef ENVD_SHA256_H
#define ENVD_SHA256_H

#include <stddef.h>
#include <stdint.h>

/* Compresses `count` 64-byte blocks into the state. */
typedef void sha256_blocks_fn(uint32_t state[8], const unsigned char *data, size_t count);

struct sha256 {
  uint32_t state[8];
  uint64_t bytes;            /* hashed so far, the partial block included */
  unsigned char block[64];   /* a partial block waiting for the rest */
  size_t used;               /* bytes of it */
  sha256_blocks_fn *blocks;
};

/* The block function of this CPU: SHA-NI when it has it, else the portable one. */
sha256_blocks_fn *sha256_best_blocks(void);
/* The portable block function (and, for the tests, the SHA-NI one, or NULL on a CPU without). */
sha256_blocks_fn sha256_blocks_portable;
sha256_blocks_fn *sha256_shani_blocks(void);

void sha256_init(struct sha256 *s, sha256_blocks_fn *blocks);
void sha256_update(struct sha256 *s, const void *data, size_t length);
/* Finishes the hash: 64 lowercase hex digits and a NUL into `hex`. */
void sha256_hex(struct sha256 *s, char hex[65]);

#endif
