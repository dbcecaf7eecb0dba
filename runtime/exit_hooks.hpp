#pragma once
// Work that must be stopped before exit's handlers run: a compile inside libNVVM, a GEMM being
// timed, a plan being captured.
//
// [ Note -- before exit's handlers ]
//   exit() (and a return from main) runs, in this order: the calling thread's thread_local
//   destructors, then the atexit list newest first, the static destructors of every library on
//   it. A library loaded late (libNVVM and nvJitLink are dlopened by the first linked kernel)
//   or one that makes statics lazily puts its destructors on that list *after* any handler of
//   ours registered earlier: they run first, with our planner's compile still inside them (seen
//   on the H200: SIGSEGV or a hang in libnvvm / libnvJitLink in about 1 exit in 20, LTO only).
//   No atexit handler can be sure to run first. The main thread's thread_local destructors
//   can: the hooks run from one, armed on the main thread when the library is loaded there and
//   on the main thread's first op. exit() called on another thread falls back to the atexit
//   handlers each component registers as well (kernel_compiler.cpp's DrainTicker).
namespace livefuse::exit_hooks {

// Runs `fn` at the main thread's exit, before exit's handlers; hooks run newest first. Each
// must be bounded in time (it waits for work in hand, never for the program).
void add(void (*fn)());

// Arms the hooks when called on the main thread (cheap after the first call; any thread).
void arm_if_main_thread();

// Forgets every hook (a forked test child: the parent's hooks are not its own).
void reset_for_testing();

}  // namespace livefuse::exit_hooks
