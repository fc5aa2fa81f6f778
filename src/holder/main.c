/*
 * main.c — the envd-holder binary and its jobs: a command's holder (holder.h),
 * the spawner that forks holders for envd (spawner.h), the receiver of a
 * large upload's body (receive.h), the relay that hashes a large archive
 * upload on its way to envd (relay.h), the probe of a mount that may hang
 * (probe.h), setting the clock (system.h), the snapshot and fork jobs
 * (machine.h), the port watch's socket dumps (sockets.h), and the loopback
 * forward's splice relay (forward.h), with its steering in the kernel (steer.h). One
 * static binary, so a guest carries one file and every job starts without a
 * dynamic loader.
 */
#include <string.h>

#include "forward.h"
#include "holder.h"
#include "machine.h"
#include "probe.h"
#include "receive.h"
#include "relay.h"
#include "sockets.h"
#include "spawner.h"
#include "system.h"

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--receive") == 0) return receive_main(argc, argv);
  if (argc > 1 && strcmp(argv[1], "--relay") == 0) return relay_main(argc, argv);
  if (argc > 1 && strcmp(argv[1], "--probe") == 0) return probe_main(argc, argv);
  if (argc > 1 && strcmp(argv[1], "--spawner") == 0) return spawner_main(argc, argv, holder_main);
  if (argc > 1 && strcmp(argv[1], "--set-clock") == 0) return set_clock_main(argc, argv);
  if (argc > 1 && strcmp(argv[1], "--sync") == 0) return sync_main(argc, argv);
  if (argc > 1 && strcmp(argv[1], "--fsfreeze") == 0) return fsfreeze_main(argc, argv);
  if (argc > 1 && strcmp(argv[1], "--fsthaw") == 0) return fsthaw_main(argc, argv);
  if (argc > 1 && strcmp(argv[1], "--add-entropy") == 0) return add_entropy_main(argc, argv);
  if (argc > 1 && strcmp(argv[1], "--set-hostname") == 0) return set_hostname_main(argc, argv);
  if (argc > 1 && strcmp(argv[1], "--forward") == 0) return forward_main(argc, argv);
  if (argc > 1 && strcmp(argv[1], "--watch-sockets") == 0) return watch_sockets_main(argc, argv);
  return holder_main(argc, argv);
}
