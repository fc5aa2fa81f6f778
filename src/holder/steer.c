/* steer.c — the sk_lookup program, its SOCKHASH and its link to this network namespace (steer.h). */
#define _GNU_SOURCE
#include "steer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_bpf
#define SYS_bpf 321
#endif

/* The map's key, as the program builds it on its stack: the local end of the connection asked for. */
struct steer_key {
  uint32_t family;  /* AF_INET or AF_INET6 */
  uint32_t port;    /* host byte order, as ctx->local_port */
  uint32_t addr[4]; /* network byte order; an IPv4 address in addr[0], the rest 0 */
};

/*
 * Instructions, written out (no compiler, no libbpf): each macro is one
 * struct bpf_insn of the encoding in Documentation/bpf/standardization/
 * instruction-set.rst. R1 is the program's context, R10 its frame pointer,
 * R0 a call's result, R1-R5 a call's arguments (clobbered by it), R6-R9 kept.
 */
#define INSN(CODE, DST, SRC, OFF, IMM) ((struct bpf_insn){.code = (CODE), .dst_reg = (DST), .src_reg = (SRC), .off = (OFF), .imm = (IMM)})
/* dst = src (64-bit) */
#define MOV_REG(DST, SRC) INSN(BPF_ALU64 | BPF_MOV | BPF_X, DST, SRC, 0, 0)
/* dst = imm */
#define MOV_IMM(DST, IMM) INSN(BPF_ALU64 | BPF_MOV | BPF_K, DST, 0, 0, IMM)
/* dst += imm */
#define ADD_IMM(DST, IMM) INSN(BPF_ALU64 | BPF_ADD | BPF_K, DST, 0, 0, IMM)
/* dst = *(u32 *)(src + off) */
#define LOAD32(DST, SRC, OFF) INSN(BPF_LDX | BPF_MEM | BPF_W, DST, SRC, OFF, 0)
/* *(u32 *)(dst + off) = src */
#define STORE32(DST, OFF, SRC) INSN(BPF_STX | BPF_MEM | BPF_W, DST, SRC, OFF, 0)
/* *(u64 *)(dst + off) = imm */
#define STORE64_IMM(DST, OFF, IMM) INSN(BPF_ST | BPF_MEM | BPF_DW, DST, 0, OFF, IMM)
/* if dst == imm (!= imm) skip the next OFF instructions */
#define JUMP_IF_EQ(DST, IMM, OFF) INSN(BPF_JMP | BPF_JEQ | BPF_K, DST, 0, OFF, IMM)
#define JUMP_IF_NE(DST, IMM, OFF) INSN(BPF_JMP | BPF_JNE | BPF_K, DST, 0, OFF, IMM)
/* skip the next OFF instructions */
#define JUMP(OFF) INSN(BPF_JMP | BPF_JA, 0, 0, OFF, 0)
/* dst = the map of fd FD (two instructions: a 64-bit immediate the kernel resolves to the map) */
#define LOAD_MAP(DST, FD) INSN(BPF_LD | BPF_DW | BPF_IMM, DST, BPF_PSEUDO_MAP_FD, 0, FD), INSN(0, 0, 0, 0, 0)
#define CALL(HELPER) INSN(BPF_JMP | BPF_CALL, 0, 0, 0, HELPER)
#define EXIT() INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)

#define CTX(FIELD) ((int16_t)offsetof(struct bpf_sk_lookup, FIELD))
/* The key's place on the stack, and its fields'. */
#define KEY ((int16_t)-(int16_t)sizeof(struct steer_key))
#define KEY_AT(FIELD) ((int16_t)(KEY + (int16_t)offsetof(struct steer_key, FIELD)))

static int map_fd = -1, link_fd = -1;
static int setup_error; /* the errno of a setup that failed, for good */

static long bpf(int cmd, union bpf_attr *attr) { return syscall(SYS_bpf, cmd, attr, sizeof *attr); }

/* The program: 37 instructions, a miss or any failure passes the lookup on unchanged. */
static int load_program(void) {
  struct bpf_insn program[] = {
      MOV_REG(BPF_REG_6, BPF_REG_1),                          /* 0  r6 = ctx, kept across calls */
      LOAD32(BPF_REG_2, BPF_REG_6, CTX(protocol)),            /* 1  TCP only: UDP stays on the relay (forward.h) */
      JUMP_IF_NE(BPF_REG_2, IPPROTO_TCP, 32),                 /* 2  → 35 pass */
      STORE64_IMM(BPF_REG_10, KEY, 0),                        /* 3  key = {0}: the verifier wants it all written */
      STORE64_IMM(BPF_REG_10, KEY + 8, 0),                    /* 4 */
      STORE64_IMM(BPF_REG_10, KEY + 16, 0),                   /* 5 */
      LOAD32(BPF_REG_2, BPF_REG_6, CTX(family)),              /* 6  key.family = ctx->family */
      STORE32(BPF_REG_10, KEY_AT(family), BPF_REG_2),         /* 7 */
      LOAD32(BPF_REG_3, BPF_REG_6, CTX(local_port)),          /* 8  key.port = ctx->local_port */
      STORE32(BPF_REG_10, KEY_AT(port), BPF_REG_3),           /* 9 */
      JUMP_IF_EQ(BPF_REG_2, AF_INET6, 3),                     /* 10 → 14 */
      LOAD32(BPF_REG_3, BPF_REG_6, CTX(local_ip4)),           /* 11 key.addr[0] = ctx->local_ip4 */
      STORE32(BPF_REG_10, KEY_AT(addr[0]), BPF_REG_3),        /* 12 */
      JUMP(8),                                                /* 13 → 22 */
      LOAD32(BPF_REG_3, BPF_REG_6, CTX(local_ip6[0])),        /* 14 key.addr = ctx->local_ip6 */
      STORE32(BPF_REG_10, KEY_AT(addr[0]), BPF_REG_3),        /* 15 */
      LOAD32(BPF_REG_3, BPF_REG_6, CTX(local_ip6[1])),        /* 16 */
      STORE32(BPF_REG_10, KEY_AT(addr[1]), BPF_REG_3),        /* 17 */
      LOAD32(BPF_REG_3, BPF_REG_6, CTX(local_ip6[2])),        /* 18 */
      STORE32(BPF_REG_10, KEY_AT(addr[2]), BPF_REG_3),        /* 19 */
      LOAD32(BPF_REG_3, BPF_REG_6, CTX(local_ip6[3])),        /* 20 */
      STORE32(BPF_REG_10, KEY_AT(addr[3]), BPF_REG_3),        /* 21 */
      LOAD_MAP(BPF_REG_1, map_fd),                            /* 22-23 r0 = lookup(map, &key): the listener, referenced */
      MOV_REG(BPF_REG_2, BPF_REG_10),                         /* 24 */
      ADD_IMM(BPF_REG_2, KEY),                                /* 25 */
      CALL(BPF_FUNC_map_lookup_elem),                         /* 26 */
      JUMP_IF_EQ(BPF_REG_0, 0, 7),                            /* 27 not ours → 35 pass */
      MOV_REG(BPF_REG_7, BPF_REG_0),                          /* 28 r7 = the listener */
      MOV_REG(BPF_REG_1, BPF_REG_6),                          /* 29 bpf_sk_assign(ctx, sk, 0): flags 0 never */
      MOV_REG(BPF_REG_2, BPF_REG_7),                          /* 30 replaces another program's choice (-EEXIST) */
      MOV_IMM(BPF_REG_3, 0),                                  /* 31 and a failure leaves the kernel's lookup, */
      CALL(BPF_FUNC_sk_assign),                               /* 32 which finds envd's listener: the relay */
      MOV_REG(BPF_REG_1, BPF_REG_7),                          /* 33 the lookup's reference goes back */
      CALL(BPF_FUNC_sk_release),                              /* 34 */
      MOV_IMM(BPF_REG_0, SK_PASS),                            /* 35 pass: assigned or not */
      EXIT(),                                                 /* 36 */
  };
  static char log[4096];
  /* The helpers used are not GPL-only: the license string only has to be one the kernel knows. */
  static const char license[] = "Dual MIT/GPL";
  union bpf_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.prog_type = BPF_PROG_TYPE_SK_LOOKUP;
  attr.expected_attach_type = BPF_SK_LOOKUP;
  attr.insns = (uint64_t)(uintptr_t)program;
  attr.insn_cnt = sizeof program / sizeof program[0];
  attr.license = (uint64_t)(uintptr_t)license;
  attr.log_buf = (uint64_t)(uintptr_t)log;
  attr.log_size = sizeof log;
  attr.log_level = 1;
  int fd = (int)bpf(BPF_PROG_LOAD, &attr);
  if (fd < 0) {
    int err = errno;
    /* To envd's log, through stderr: why the verifier said no. */
    if (log[0]) fprintf(stderr, "envd-holder --forward: sk_lookup program refused: %.400s\n", log);
    errno = err;
  }
  return fd;
}

static int setup(void) {
  union bpf_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.map_type = BPF_MAP_TYPE_SOCKHASH;
  attr.key_size = sizeof(struct steer_key);
  attr.value_size = sizeof(uint32_t); /* a socket's fd on update */
  attr.max_entries = STEER_MAX_KEYS;
  memcpy(attr.map_name, "envd_forward", sizeof "envd_forward");
  map_fd = (int)bpf(BPF_MAP_CREATE, &attr);
  if (map_fd < 0) return -1;
  int program = load_program();
  int netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (program < 0 || netns < 0) {
    int err = errno;
    if (program >= 0) close(program);
    errno = err;
    return -1;
  }
  memset(&attr, 0, sizeof attr);
  attr.link_create.prog_fd = (uint32_t)program;
  attr.link_create.target_fd = (uint32_t)netns;
  attr.link_create.attach_type = BPF_SK_LOOKUP;
  link_fd = (int)bpf(BPF_LINK_CREATE, &attr);
  int err = errno;
  /* The link holds the program, and the program the map: only the link's fd (and the map's, to update it) stay here. */
  close(program);
  close(netns);
  errno = err;
  return link_fd < 0 ? -1 : 0;
}

/* ADDRESS:PORT as a key; 0, or -1 (EINVAL) when ADDRESS is no IP address. */
static int key_of(const char *address, unsigned port, struct steer_key *key) {
  memset(key, 0, sizeof *key);
  key->port = port;
  if (inet_pton(AF_INET, address, key->addr) == 1) key->family = AF_INET;
  else if (inet_pton(AF_INET6, address, key->addr) == 1) key->family = AF_INET6;
  else {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

int steer_insert(const char *address, unsigned port, int listener) {
  struct steer_key key;
  if (key_of(address, port, &key) != 0) return -1;
  /* Only a TCP listener of the key's own family: bpf_sk_assign would refuse the rest at every connection. */
  int domain = 0, protocol = 0, listening = 0;
  socklen_t len = sizeof domain;
  if (getsockopt(listener, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) return -1;
  len = sizeof protocol;
  if (getsockopt(listener, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0) return -1;
  len = sizeof listening;
  if (getsockopt(listener, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0) return -1;
  if ((uint32_t)domain != key.family || protocol != IPPROTO_TCP || !listening) {
    errno = EPROTOTYPE;
    return -1;
  }
  if (map_fd < 0 && !setup_error && setup() != 0) setup_error = errno;
  if (setup_error) {
    errno = setup_error;
    return -1;
  }
  uint32_t value = (uint32_t)listener;
  union bpf_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.map_fd = (uint32_t)map_fd;
  attr.key = (uint64_t)(uintptr_t)&key;
  attr.value = (uint64_t)(uintptr_t)&value;
  attr.flags = BPF_ANY;
  return bpf(BPF_MAP_UPDATE_ELEM, &attr) == 0 ? 0 : -1;
}

void steer_delete(const char *address, unsigned port) {
  struct steer_key key;
  if (map_fd < 0 || key_of(address, port, &key) != 0) return;
  union bpf_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.map_fd = (uint32_t)map_fd;
  attr.key = (uint64_t)(uintptr_t)&key;
  (void)bpf(BPF_MAP_DELETE_ELEM, &attr); /* ENOENT: the kernel dropped it at the listener's close */
}
