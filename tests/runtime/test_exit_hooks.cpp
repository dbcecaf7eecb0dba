// Exit hooks (runtime/exit_hooks.hpp) run at the main thread's exit before every atexit
// handler, also those registered after them: the guarantee the compiler's drain and the
// planner's stop rely on (a library loaded late puts its destructors after any handler of ours).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "runtime/exit_hooks.hpp"
#include "test_util.hpp"

namespace {
int g_pipe = -1;
void put(char c) { (void)!write(g_pipe, &c, 1); }

// What a child that calls exit (or returns through exit) wrote, in order.
std::string child_trace(void (*body)()) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  if (pid == 0) {
    // The forking thread is the child's main thread (its tid is the child's pid).
    close(fds[0]);
    g_pipe = fds[1];
    livefuse::exit_hooks::reset_for_testing();
    body();
    _exit(99);  // not reached: body exits
  }
  close(fds[1]);
  std::string got;
  char c;
  while (read(fds[0], &c, 1) == 1) got += c;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 7);
  return got;
}
}  // namespace

TEST_CASE("exit hooks: run newest first, before atexit handlers registered after them") {
  const std::string got = child_trace([] {
    std::atexit([] { put('e'); });  // older than the hooks: after them anyway
    livefuse::exit_hooks::arm_if_main_thread();
    livefuse::exit_hooks::add([] { put('1'); });
    livefuse::exit_hooks::add([] { put('2'); });
    std::atexit([] { put('a'); });  // newer than the hooks: still after them
    std::exit(7);
  });
  CHECK(got == "21ae");
}

TEST_CASE("exit hooks: a hook added on another thread runs at the main thread's exit") {
  const std::string got = child_trace([] {
    std::thread([] { livefuse::exit_hooks::add([] { put('t'); }); }).join();
    std::atexit([] { put('a'); });
    std::exit(7);
  });
  CHECK(got == "ta");
}
