#include "core/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvw {
namespace {

constexpr uint64_t kStop = ~uint64_t{0};
// Polls before sleeping: a few microseconds to ~15 us depending on the CPU's pause latency.
// Long enough for the short phases of a decode step, short enough that a waiting thread does
// not keep a core from a descheduled one when the machine is oversubscribed (2048 polls, up to
// ~100 us, slowed sanitized servers sharing 2 cores with other tests past their deadlines).
constexpr int kSpinPolls = 256;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Waits until a.load() != old: spins, then blocks. Returns the new value.
template <class T>
T wait_change(const std::atomic<T>& a, T old) {
  for (int i = 0; i < kSpinPolls; ++i) {
    const T v = a.load(std::memory_order_acquire);
    if (v != old) return v;
    cpu_relax();
  }
  for (;;) {
    a.wait(old, std::memory_order_acquire);
    const T v = a.load(std::memory_order_acquire);
    if (v != old) return v;
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = (int)std::max(1u, std::thread::hardware_concurrency());
  num_threads_ = num_threads;
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  generation_.store(kStop, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (num_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  fn(0, num_threads_);
  for (int left = pending_.load(std::memory_order_acquire); left != 0;) {
    left = wait_change(pending_, left);
  }
  job_ = nullptr;
}

void ThreadPool::worker(int ith) {
  uint64_t seen = 0;
  for (;;) {
    seen = wait_change(generation_, seen);
    if (seen == kStop) return;
    (*job_)(ith, num_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace kvw
