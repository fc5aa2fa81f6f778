/*
 * wire.h — little-endian integers of the live channel and the frames
 * (docs/holder-protocol.md: "every message: u8 type | u32 LE payload length |
 * payload, little endian inside").
 */
#ifndef ENVD_WIRE_H
#define ENVD_WIRE_H

#include <stdint.h>

/* The usage file and the wire are little endian; the holder stores native u64s into the usage file. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "envd-holder assumes a little-endian machine");

static inline void put_u16(unsigned char *p, uint16_t v) { p[0] = v & 0xff; p[1] = v >> 8; }
static inline void put_u32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (v >> (8 * i)) & 0xff; }
static inline void put_u64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (v >> (8 * i)) & 0xff; }
static inline uint16_t get_u16(const unsigned char *p) { return p[0] | (uint16_t)(p[1] << 8); }
static inline uint32_t get_u32(const unsigned char *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static inline uint64_t get_u64(const unsigned char *p) { return get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

#endif
