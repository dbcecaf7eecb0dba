// The doctest main of every suite. A crash (a signal, also one after the last test case, in
// teardown) prints the stack before the process dies, so a failure on a remote GPU machine
// leaves more than an exit status behind.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace {

void on_fatal_signal(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  char head[96];
  const int len = std::snprintf(head, sizeof head, "\n*** fatal signal %d; stack:\n", sig);
  if (len > 0) (void)!write(STDERR_FILENO, head, static_cast<size_t>(len));
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_fatal_signal);
  doctest::Context ctx(argc, argv);
  const int rc = ctx.run();
  if (ctx.shouldExit()) return rc;  // --help, --list-test-cases, ...
  std::fflush(stdout);
  std::fprintf(stderr, "[tests] all cases ran (rc %d); process teardown follows\n", rc);
  return rc;
}
