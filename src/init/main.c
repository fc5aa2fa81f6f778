// envd-init: PID 1 of a VM booted from a plain container image, which has no
// systemd (docs/guest.md). It mounts /proc, /sys, /dev, /dev/pts, /dev/shm,
// /run, /tmp and cgroup2, brings up lo and the network the kernel command line
// names, sets the hostname, starts envd and restarts it when it ends (with
// back-off; commands live on and are re-adopted, as under systemd), reaps every
// orphan, and powers off cleanly on SIGTERM or busybox's poweroff (SIGUSR2),
// halt (SIGUSR1) and reboot (SIGINT: Ctrl-Alt-Del).
//
// Not PID 1 (a test, a container): it makes itself the subreaper of what it
// starts and leaves the machine alone; "power off" then means exit.
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "envd-process.h"
#include "log.h"
#include "mounts.h"
#include "network.h"

/** First restart delay after envd ended; doubled while it keeps ending early, up to MAX. */
#define RESTART_FIRST_MS 200
#define RESTART_MAX_MS 5000
/** envd that ran this long counts as healthy: the next restart is quick again. */
#define HEALTHY_MS 10000
/** How long envd may take to end its commands on SIGTERM, then the rest get SIGTERM, then SIGKILL. */
#define ENVD_STOP_MS 10000
#define OTHERS_STOP_MS 3000

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/** Reaps every child that has ended; returns 1 if `watched` was among them. */
static int reap(pid_t watched) {
  int found = 0, status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    if (pid != watched) continue;
    found = 1;
    if (WIFSIGNALED(status)) log_line("envd ended by signal %d", WTERMSIG(status));
    else log_line("envd exited with %d", WEXITSTATUS(status));
  }
  return found;
}

/** Waits up to `ms` for a signal of `set`; returns it, or 0 on time-out. */
static int wait_signal(const sigset_t *set, long long ms) {
  struct timespec timeout = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  int sig = sigtimedwait(set, NULL, ms < 0 ? NULL : &timeout);
  return sig < 0 ? 0 : sig;
}

/** Reaps until `pid` is gone or `ms` passed; returns 1 if it is gone. */
static int await_end(const sigset_t *set, pid_t pid, long long ms) {
  long long deadline = now_ms() + ms;
  while (pid > 0 && kill(pid, 0) == 0) {
    if (reap(pid)) return 1;
    long long left = deadline - now_ms();
    if (left <= 0) return 0;
    wait_signal(set, left < 100 ? left : 100);
  }
  return 1;
}

/** Ends envd (it kills its commands' trees on SIGTERM), then everything else, then the machine. */
static void shut_down(const sigset_t *set, pid_t envd, unsigned int how, int pid1) {
  log_line("shutting down: stopping envd");
  if (envd > 0) kill(envd, SIGTERM);
  await_end(set, envd, ENVD_STOP_MS);
  if (!pid1) _exit(0);
  kill(-1, SIGTERM);
  long long deadline = now_ms() + OTHERS_STOP_MS;
  while (now_ms() < deadline && waitpid(-1, NULL, WNOHANG) >= 0) wait_signal(set, 100);
  kill(-1, SIGKILL);
  while (waitpid(-1, NULL, 0) > 0) {
  }
  unmount_for_poweroff();
  log_line("%s", how == RB_AUTOBOOT ? "rebooting" : how == RB_HALT_SYSTEM ? "halted" : "powering off");
  reboot((int)how);
  _exit(0); // reboot() failed: as PID 1 this panics the kernel, which at least ends the VM
}

int main(void) {
  int pid1 = getpid() == 1;
  sigset_t set;
  sigemptyset(&set);
  int handled[] = {SIGCHLD, SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGPWR, SIGHUP};
  for (size_t i = 0; i < sizeof handled / sizeof *handled; i++) sigaddset(&set, handled[i]);
  sigprocmask(SIG_BLOCK, &set, NULL);
  if (pid1) {
    mount_filesystems();
    set_up_network();
    reboot(RB_DISABLE_CAD); // Ctrl-Alt-Del becomes SIGINT to us
  } else {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
  }

  long long delay = RESTART_FIRST_MS, started = now_ms(), restart_at = -1;
  pid_t envd = start_envd();
  if (envd < 0) restart_at = now_ms() + delay;
  for (;;) {
    long long wait = restart_at < 0 ? -1 : restart_at - now_ms();
    int sig = wait == 0 || (restart_at >= 0 && wait < 0) ? 0 : wait_signal(&set, wait);
    if (sig == SIGTERM || sig == SIGUSR2 || sig == SIGPWR) shut_down(&set, envd, RB_POWER_OFF, pid1);
    if (sig == SIGUSR1) shut_down(&set, envd, RB_HALT_SYSTEM, pid1);
    if (sig == SIGINT) shut_down(&set, envd, RB_AUTOBOOT, pid1);
    if (envd > 0 && reap(envd)) {
      // Quick again after a healthy run; doubled for each time envd ends early in a row.
      if (now_ms() - started >= HEALTHY_MS) delay = RESTART_FIRST_MS;
      envd = -1;
      restart_at = now_ms() + delay;
      log_line("restarting envd in %lld ms", delay);
      delay = delay * 2 > RESTART_MAX_MS ? RESTART_MAX_MS : delay * 2;
    } else if (sig == SIGCHLD) {
      reap(-1);
    }
    if (envd < 0 && restart_at >= 0 && now_ms() >= restart_at) {
      started = now_ms();
      envd = start_envd();
      restart_at = envd < 0 ? now_ms() + RESTART_MAX_MS : -1;
    }
  }
}
