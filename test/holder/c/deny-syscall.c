/*
 * deny-syscall: runs a program with one system call failing with EPERM (a
 * seccomp filter, which it and its children keep across fork and exec), so a
 * test can see how the holder and its command's process handle a failure that
 * does not happen on a healthy machine. Usage: deny-syscall RULE PROGRAM [ARGS...]
 *   setsid       setsid(2)
 *   tiocsctty    ioctl(fd, TIOCSCTTY, ...)
 *   dup-to-2     dup2(fd, 2) and dup3(fd, 2, ...)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LOAD_NR BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))
#define LOAD_ARG(i) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[i]))
#define ALLOW BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
#define DENY BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM)

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  struct sock_filter setsid_rule[] = {
    LOAD_NR, BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setsid, 0, 1), DENY, ALLOW,
  };
  struct sock_filter tiocsctty_rule[] = {
    LOAD_NR, BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 3),
    LOAD_ARG(1), BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCSCTTY, 0, 1), DENY, ALLOW,
  };
  struct sock_filter dup_rule[] = {
    LOAD_NR, BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_dup2, 1, 0), BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_dup3, 0, 3),
    LOAD_ARG(1), BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 2, 0, 1), DENY, ALLOW,
  };
  struct sock_fprog prog;
  if (strcmp(argv[1], "setsid") == 0) prog = (struct sock_fprog){ sizeof setsid_rule / sizeof *setsid_rule, setsid_rule };
  else if (strcmp(argv[1], "tiocsctty") == 0) prog = (struct sock_fprog){ sizeof tiocsctty_rule / sizeof *tiocsctty_rule, tiocsctty_rule };
  else if (strcmp(argv[1], "dup-to-2") == 0) prog = (struct sock_fprog){ sizeof dup_rule / sizeof *dup_rule, dup_rule };
  else return 2;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) {
    perror("deny-syscall: seccomp");
    return 1;
  }
  execv(argv[2], argv + 2);
  perror("deny-syscall: exec");
  return 127;
}
