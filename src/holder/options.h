/*
 * options.h — a holder's command line (docs/holder-protocol.md, "Invocation"):
 *   envd-holder --dir D --usage F --slot N --memory-budget B --spool-dir D
 *     --spool-budget B --cap B [--stdin] [--pty CxR] [--hold-output MS]
 *     [--user UID:GID[:GROUP,...]] -- FILE [ARGS...]
 */
#ifndef ENVD_OPTIONS_H
#define ENVD_OPTIONS_H

#include <stdint.h>

#include <sys/types.h>

#define USAGE_SLOTS 4096
#define MAX_GROUPS 256 /* supplementary groups of the command's user (Linux allows 65536; images have a handful) */

struct options {
  const char *dir;       /* the command's state directory (absolute) */
  const char *cmd_id;    /* its last component: names the spool segments */
  const char *usage;     /* the usage table shared by all holders */
  const char *spool_dir; /* absolute */
  unsigned slot;
  uint64_t memory_budget, spool_budget, cap;
  int stdin;
  int pty;
  uint64_t hold_output_ms; /* read nothing until the first client says LIVE_ON or LIVE_OFF, at most this long (live.h) */
  unsigned short cols, rows;
  /* --user: who the command runs as (the holder stays root); unset: as the holder. */
  const char *cgroup;    /* --cgroup: the cgroup v2 directory the command joins before exec, or NULL */
  int switch_user;
  uid_t uid;
  gid_t gid;
  gid_t groups[MAX_GROUPS];
  size_t group_count;
  char **argv; /* the command: file, then arguments */
};

/* Fills `opt` (zeroed), or says what is wrong on an "error" line and exits 1. */
void parse_options(struct options *opt, int argc, char **argv);

#endif
