/* options.c — a holder's command line (options.h). */
#define _GNU_SOURCE
#include "options.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fail.h"

static uint64_t parse_u64(const char *name, const char *text) {
  if (!text || *text < '0' || *text > '9') fail("%s needs a non-negative integer", name);
  errno = 0;
  char *end;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || *end) fail("%s: bad number %s", name, text);
  return v;
}

/* "<cols>x<rows>", each 1-65535. */
static void parse_pty(struct options *opt, const char *v) {
  char *x;
  errno = 0;
  unsigned long c = strtoul(v, &x, 10), r = 0;
  int ok = x != v && *x == 'x';
  if (ok) {
    char *end;
    r = strtoul(x + 1, &end, 10);
    ok = end != x + 1 && !*end;
  }
  if (!ok || errno || c < 1 || c > 65535 || r < 1 || r > 65535) fail("--pty needs <cols>x<rows>, got %s", v);
  opt->pty = 1;
  opt->cols = (unsigned short)c;
  opt->rows = (unsigned short)r;
}

/* An id of --user: a decimal number below 2^32 - 1 (that one is "no id" to the kernel). */
static uint32_t parse_id(const char *text, size_t len, const char *whole) {
  uint64_t v = 0;
  if (len == 0 || len > 10) fail("--user needs UID:GID[:GROUP,...], got %s", whole);
  for (size_t i = 0; i < len; i++) {
    if (text[i] < '0' || text[i] > '9') fail("--user needs UID:GID[:GROUP,...], got %s", whole);
    v = v * 10 + (uint64_t)(text[i] - '0');
  }
  if (v >= 0xFFFFFFFFu) fail("--user: id %.*s is out of range", (int)len, text);
  return (uint32_t)v;
}

/* "<uid>:<gid>[:<gid>,<gid>...]": envd resolved the names (/etc/passwd, /etc/group); the holder only applies them. */
static void parse_user(struct options *opt, const char *v) {
  const char *p = v, *end;
  end = strchr(p, ':');
  if (!end) fail("--user needs UID:GID[:GROUP,...], got %s", v);
  opt->uid = parse_id(p, (size_t)(end - p), v);
  p = end + 1;
  end = strchr(p, ':');
  opt->gid = parse_id(p, end ? (size_t)(end - p) : strlen(p), v);
  opt->switch_user = 1;
  if (!end || !end[1]) return;
  for (p = end + 1; *p; p = *end ? end + 1 : end) {
    end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    if (opt->group_count == MAX_GROUPS) fail("--user: more than %d groups", MAX_GROUPS);
    opt->groups[opt->group_count++] = parse_id(p, (size_t)(end - p), v);
  }
}

void parse_options(struct options *opt, int argc, char **argv) {
  int have_slot = 0, have_mem = 0, have_spool = 0, have_cap = 0;
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--") == 0) { i++; break; }
    if (strcmp(a, "--stdin") == 0) { opt->stdin = 1; continue; }
    if (!v) fail("%s needs a value", a);
    if (strcmp(a, "--dir") == 0) opt->dir = v;
    else if (strcmp(a, "--usage") == 0) opt->usage = v;
    else if (strcmp(a, "--spool-dir") == 0) opt->spool_dir = v;
    else if (strcmp(a, "--slot") == 0) {
      uint64_t s = parse_u64(a, v);
      if (s >= USAGE_SLOTS) fail("--slot must be below %d", USAGE_SLOTS);
      opt->slot = (unsigned)s;
      have_slot = 1;
    } else if (strcmp(a, "--memory-budget") == 0) { opt->memory_budget = parse_u64(a, v); have_mem = 1; }
    else if (strcmp(a, "--spool-budget") == 0) { opt->spool_budget = parse_u64(a, v); have_spool = 1; }
    else if (strcmp(a, "--cap") == 0) { opt->cap = parse_u64(a, v); have_cap = 1; }
    else if (strcmp(a, "--pty") == 0) parse_pty(opt, v);
    else if (strcmp(a, "--hold-output") == 0) opt->hold_output_ms = parse_u64(a, v);
    else if (strcmp(a, "--user") == 0) parse_user(opt, v);
    else if (strcmp(a, "--cgroup") == 0) opt->cgroup = v;
    else fail("unknown option %s", a);
    i++;
  }
  if (!opt->dir || !opt->usage || !opt->spool_dir || !have_slot || !have_mem || !have_spool || !have_cap)
    fail("usage: envd-holder --dir D --usage F --slot N --memory-budget B --spool-dir D --spool-budget B --cap B [--stdin] [--pty CxR] [--hold-output MS] [--user UID:GID[:GROUP,...]] [--cgroup DIR] -- FILE [ARGS...]");
  /* Segment paths are listed as absolute paths, and the holder's cwd is the command's. */
  if (opt->dir[0] != '/' || opt->spool_dir[0] != '/') fail("--dir and --spool-dir must be absolute paths");
  if (i >= argc) fail("no command after --");
  opt->argv = argv + i;
  const char *slash = strrchr(opt->dir, '/');
  opt->cmd_id = slash + 1;
  if (!*opt->cmd_id) fail("--dir must not end with /");
}
