// seccomp_exec PROGRAM ARGS...: runs PROGRAM under a seccomp filter that allows every system call,
// so that its threads report "Seccomp: 2" and CRIU seizes them with PTRACE_O_SUSPEND_SECCOMP (the
// option the plugin must put back after running the restore thread, Note [Restore thread]).
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: seccomp_exec PROGRAM [ARGS...]\n");
    return 2;
  }
  sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
  sock_fprog prog = {sizeof allow / sizeof allow[0], allow};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    std::perror("seccomp_exec: installing the filter");
    return 2;
  }
  execv(argv[1], argv + 1);
  std::perror("seccomp_exec: exec");
  return 127;
}
