// The per-thread free list of handle blocks (runtime/handle_pool.hpp, the Note).
#include "runtime/handle_pool.hpp"

namespace livefuse::handle_pool {

// Under AddressSanitizer every block comes from the heap: a handle used after its release must
// still be reported, not read from a recycled block.
#if defined(__SANITIZE_ADDRESS__)
void* take() { return ::operator new(kBlock); }
void give(void* block) { ::operator delete(block); }
size_t free_blocks() { return 0; }
#else

namespace {

struct Node {
  Node* next;
};

// Trivially destructible, so it stays readable while the thread's other thread_local
// destructors run (they may drop handles after Reaper emptied the list).
struct List {
  Node* head;
  size_t n;
  bool reaper_set;  // Reaper is registered for this thread
  bool gone;        // Reaper ran: blocks go to the heap
};
thread_local List t_list = {nullptr, 0, false, false};

struct Reaper {
  bool armed = false;
  ~Reaper() {
    while (Node* p = t_list.head) {
      t_list.head = p->next;
      ::operator delete(p);
    }
    t_list.n = 0;
    t_list.gone = true;
  }
};
thread_local Reaper t_reaper;

}  // namespace

void* take() {
  List& l = t_list;
  if (Node* p = l.head) {
    l.head = p->next;
    --l.n;
    return p;
  }
  return ::operator new(kBlock);
}

void give(void* block) {
  List& l = t_list;
  if (l.gone || l.n >= kMostFree) {
    ::operator delete(block);
    return;
  }
  if (!l.reaper_set) {
    l.reaper_set = true;
    t_reaper.armed = true;  // its first use on a thread registers its destructor
  }
  Node* p = static_cast<Node*>(block);
  p->next = l.head;
  l.head = p;
  ++l.n;
}

size_t free_blocks() { return t_list.n; }

#endif

}  // namespace livefuse::handle_pool
