#include "cli_util.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <fstream>
#include <sstream>
#include <thread>

namespace lftest {

namespace fs = std::filesystem;

namespace {

// argv and envp are built before fork: between fork and exec a child of a threaded process
// may only call async-signal-safe functions.
struct Exec {
  std::deque<std::string> strings;  // a deque: pushing keeps earlier elements in place
  std::vector<char*> argv, envp;
  Exec(const std::string& exe, const std::vector<std::string>& args,
       const std::vector<std::string>& env) {
    auto keep = [&](std::string s) {
      return strings.push_back(std::move(s)), strings.back().data();
    };
    argv.push_back(keep(exe));
    for (const std::string& a : args) argv.push_back(keep(a));
    argv.push_back(nullptr);
    std::vector<std::string> all = env;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      bool overridden = false;
      for (const std::string& x : env)
        overridden |= x.substr(0, x.find('=') + 1) == kv.substr(0, kv.find('=') + 1);
      if (!overridden) all.push_back(kv);
    }
    for (std::string& kv : all) envp.push_back(keep(std::move(kv)));
    envp.push_back(nullptr);
  }
};

[[noreturn]] void exec_child(const Exec& x, int out_fd, int err_fd) {
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  ::execve(x.argv[0], x.argv.data(), x.envp.data());
  ::_exit(127);
}

int status_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

}  // namespace

pid_t spawn(const std::string& exe, const std::vector<std::string>& args,
            const std::vector<std::string>& env, const fs::path& out) {
  const Exec x(exe, args, env);
  const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE_MESSAGE(fd >= 0, "cannot open ", out.string());
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) exec_child(x, fd, fd);
  ::close(fd);
  return pid;
}

int wait_exit(pid_t pid, int timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int st = 0;
  while (::waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      FAIL("process ", pid, " did not end within ", timeout_s, " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status_code(st);
}

RunResult run(const std::string& exe, const std::vector<std::string>& args,
              const std::vector<std::string>& env, int timeout_s) {
  const fs::path dir = scratch_dir("run");
  const fs::path out = dir / "out", err = dir / "err";
  const int ofd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int efd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE((ofd >= 0 && efd >= 0));
  const Exec x(exe, args, env);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) exec_child(x, ofd, efd);
  ::close(ofd);
  ::close(efd);
  RunResult r;
  r.rc = wait_exit(pid, timeout_s);
  r.out = read_file(out);
  r.err = read_file(err);
  fs::remove_all(dir);
  return r;
}

fs::path env_path(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE_MESSAGE((v && *v), name,
                  " is not set: run this test through meson (meson test -C <build> inspect-cli)");
  return v;
}

std::string cli_path() { return env_path("LF_INSPECT_CLI").string(); }

fs::path scratch_dir(const std::string& name) {
  static int n = 0;
  const fs::path p = fs::temp_directory_path() / ("lf_inspect_" + std::to_string(::getpid()) + "_" +
                                                  name + "_" + std::to_string(n++));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot read ", p.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  REQUIRE_MESSAGE(f.good(), "cannot write ", p.string());
  f << text;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size()))
    ++n;
  return n;
}

}  // namespace lftest
