/*
 * spawner.h — `envd-holder --spawner`: starts holders for envd, so that envd
 * itself never forks per command.
 *
 * Why: envd is a ~60 MiB Node process; fork(2) copies its page tables, and
 * Node's spawn blocked envd's event loop 5-9 ms per command on a 2-CPU guest
 * (more under nested paging), which was most of envd's own cost per command.
 * This process is small and static: its fork takes ~0.2 ms, and envd only
 * writes a request to a pipe.
 *
 * envd starts one on the first command and keeps it; it is stateless, so a
 * spawner that dies (killed, OOM) is simply started again by the next command.
 * It exits at EOF on stdin, i.e. when envd is gone. The holders it starts lead
 * their own sessions and keep nothing of it, so they outlive it like they
 * outlive envd; SIGCHLD is ignored here, so the kernel reaps them.
 *
 * Request on stdin (little endian):
 *   u32 length of what follows, u32 id, u32 argc, u32 envc,
 *   then NUL-terminated strings: cwd, argv[0..argc), env[0..envc)
 * Replies on stdout, one line per request, in the order holders answer:
 *   "<id> <holderPid> <the holder's first line>\n"  (e.g. "7 4242 ready 4243 ...";
 *                                                    the line is empty if the holder said nothing)
 *   "<id> 0 spawn-errno <errno>\n"                  (pipe2 or fork failed: EMFILE, EAGAIN, ...)
 * A child that cannot chdir or exec says "error ..." as its first line, as the holder itself does.
 */
#ifndef ENVD_SPAWNER_H
#define ENVD_SPAWNER_H

/* `envd-holder --spawner`: serves envd's requests until EOF; each child runs `holder_main`. */
int spawner_main(int argc, char **argv, int (*holder_main)(int, char **));

#endif
