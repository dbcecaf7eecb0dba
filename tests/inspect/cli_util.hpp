#pragma once
// Running programs from the CLI tests: capture output and exit status, or start one in the
// background. Paths of the built programs come from the environment (tests/inspect/meson.build).
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace lftest {

struct RunResult {
  int rc = -1;  // exit status; 128 + signal when killed
  std::string out, err;
};

// Runs `exe args...` with `env` ("NAME=value") added; waits at most `timeout_s`.
RunResult run(const std::string& exe, const std::vector<std::string>& args,
              const std::vector<std::string>& env = {}, int timeout_s = 60);
// Starts `exe` in the background, stdout and stderr to `out`. Returns its pid.
pid_t spawn(const std::string& exe, const std::vector<std::string>& args,
            const std::vector<std::string>& env, const std::filesystem::path& out);
// Waits for `pid` at most `timeout_s` (then kills it and fails the test); its exit status.
int wait_exit(pid_t pid, int timeout_s);

std::filesystem::path env_path(const char* name);  // a required path from the environment
std::string cli_path();
std::filesystem::path scratch_dir(const std::string& name);  // fresh, under the temp dir
std::string read_file(const std::filesystem::path& p);
void write_file(const std::filesystem::path& p, const std::string& text);
size_t count(const std::string& text, const std::string& what);

}  // namespace lftest
