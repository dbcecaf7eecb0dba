#pragma once
// Handles (TensorImpl, Storage) from a per-thread free list of fixed-size blocks.
//
// [ Note -- why a free list of our own ]
// Every op call makes one or two handles and a served window frees its intermediates' handles
// together at its completion -- ~30 of one size class at once for a decoder layer. glibc's
// per-thread cache keeps 7 blocks of a class, so most of those frees took the slow path: in a
// CPU decode (gpt2-tiny, callgrind) malloc + free were ~750 of the ~2,850 instructions the
// runtime spent on each op call. Here a block is taken and given back in a few instructions.
// Blocks are freed by whichever thread drops the last reference (the monitor's, another user
// thread's) and join that thread's list; each list holds at most kMostFree blocks (the rest go
// back to the heap), and a thread's list is returned to the heap when the thread exits. A
// handle freed during thread exit after that (other thread_local destructors drop tensors
// too) goes straight to the heap.
#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace livefuse::handle_pool {

inline constexpr size_t kBlock = 256;      // bytes: a TensorImpl with its shared_ptr count
inline constexpr size_t kMostFree = 1024;  // blocks kept a thread (256 KB)

void* take();          // a kBlock-byte block, 16-aligned
void give(void* p);    // a block from take(), from any thread
size_t free_blocks();  // this thread's list, for tests

// An allocator for std::allocate_shared: objects (with their count) up to kBlock bytes come from
// the pool, anything larger from the heap.
template <class T>
struct Allocator {
  using value_type = T;
  Allocator() = default;
  template <class U>
  Allocator(const Allocator<U>&) noexcept {}
  T* allocate(size_t n) {
    if (pooled(n)) return static_cast<T*>(take());
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept {
    if (pooled(n))
      give(p);
    else
      ::operator delete(p);
  }
  // The one rule both sides follow: a block taken from the list goes back to it.
  static constexpr bool pooled(size_t n) { return n * sizeof(T) <= kBlock && alignof(T) <= 16; }
  template <class U>
  bool operator==(const Allocator<U>&) const noexcept {
    return true;
  }
};

template <class T, class... A>
std::shared_ptr<T> make(A&&... args) {
  return std::allocate_shared<T>(Allocator<T>{}, std::forward<A>(args)...);
}

}  // namespace livefuse::handle_pool
