// A wall-clock sampling profiler of one thread, for machines without perf (the GPU host): load
// it with LD_PRELOAD and it samples the main thread's stack every SAMPLER_US microseconds
// (default 200) of wall time, from SAMPLER_DELAY_MS (default 0) on -- time blocked in the driver counts too -- and at exit writes the
// raw stacks and the process's mappings to SAMPLER_OUT.<pid> (default sampler.out.<pid>). tools/sampler/
// report.py turns them into a table of functions (self and inclusive) with the same binaries.
//
//   gcc -O2 -shared -fPIC -o libsampler.so tools/sampler/sampler.c
//   SAMPLER_OUT=/tmp/s.out LD_PRELOAD=$PWD/libsampler.so ./program
//   python3 tools/sampler/report.py /tmp/s.out
#define _GNU_SOURCE
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { kFrames = 24, kMaxSamples = 60000 };
static void* g_stacks[kMaxSamples][kFrames];
static unsigned char g_depth[kMaxSamples];
static atomic_int g_n;
static atomic_int g_dropped;
static timer_t g_timer;
static int g_armed;

static void on_tick(int sig, siginfo_t* si, void* uc) {
  (void)sig, (void)si, (void)uc;
  const int i = atomic_fetch_add(&g_n, 1);
  if (i >= kMaxSamples) {
    atomic_fetch_add(&g_dropped, 1);
    return;
  }
  g_depth[i] = (unsigned char)backtrace(g_stacks[i], kFrames);
}

static void write_all(int fd, const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, s, n);
    if (w <= 0) return;
    s += w, n -= (size_t)w;
  }
}

__attribute__((destructor)) static void sampler_stop(void) {
  if (!g_armed) return;
  timer_delete(g_timer);
  // One file per process (a wrapper such as timeout(1) is sampled too): SAMPLER_OUT.<pid>.
  const char* base = getenv("SAMPLER_OUT");
  char path[4096];
  snprintf(path, sizeof path, "%s.%d", base && *base ? base : "sampler.out", (int)getpid());
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  char line[64];
  const int n = atomic_load(&g_n) < kMaxSamples ? atomic_load(&g_n) : kMaxSamples;
  int len = snprintf(line, sizeof line, "samples %d dropped %d\n", n, atomic_load(&g_dropped));
  write_all(fd, line, (size_t)len);
  for (int i = 0; i < n; ++i) {
    // Frame 0 is the handler, 1 the signal trampoline: the interrupted frames follow.
    for (int k = 2; k < g_depth[i]; ++k) {
      len = snprintf(line, sizeof line, "%s%lx", k == 2 ? "" : " ", (unsigned long)(uintptr_t)g_stacks[i][k]);
      write_all(fd, line, (size_t)len);
    }
    write_all(fd, "\n", 1);
  }
  write_all(fd, "maps\n", 5);
  const int maps = open("/proc/self/maps", O_RDONLY);
  if (maps >= 0) {
    char buf[4096];
    ssize_t r;
    while ((r = read(maps, buf, sizeof buf)) > 0) write_all(fd, buf, (size_t)r);
    close(maps);
  }
  close(fd);
}

__attribute__((constructor)) static void sampler_start(void) {
  void* warm[4];
  (void)backtrace(warm, 4);  // loads the unwinder now, not inside the first signal
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_tick;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGRTMIN + 3, &sa, NULL) != 0) return;
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = SIGRTMIN + 3;
  ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);  // the main thread: constructors run there
  if (timer_create(CLOCK_MONOTONIC, &ev, &g_timer) != 0) return;
  const char* us = getenv("SAMPLER_US");
  const long period = us && atol(us) > 0 ? atol(us) : 200;
  struct itimerspec it;
  memset(&it, 0, sizeof it);
  it.it_interval.tv_nsec = period * 1000;
  const char* delay = getenv("SAMPLER_DELAY_MS");
  const long ms = delay ? atol(delay) : 0;
  it.it_value.tv_sec = ms > 0 ? ms / 1000 : 0;
  it.it_value.tv_nsec = ms > 0 ? (ms % 1000) * 1000000L : period * 1000;
  if (timer_settime(g_timer, 0, &it, NULL) != 0) return;
  g_armed = 1;
}
