#include "core/thread_pool.h"

#include <chrono>

#include "core/thread_name.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvw {
namespace {

constexpr uint64_t kStop = ~uint64_t{0};
// How long a waiting thread spins before it sleeps. Waking a sleeping thread (futex) costs
// hundreds of microseconds on some VMs, more than a whole decode-step matmul, so the two threads
// of a 2-thread decode were slower than one until the spin outlasted the gaps between phases.
// The spin yields the core every few dozen polls, so an oversubscribed machine (sanitized test
// servers sharing 2 cores) still runs the descheduled threads it waits for.
constexpr auto kSpinFor = std::chrono::microseconds(2000);
constexpr int kPollsPerYield = 64;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Waits until a.load() != old: spins (yielding now and then) for kSpinFor, then blocks.
// Returns the new value.
template <class T>
T wait_change(const std::atomic<T>& a, T old) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinFor;
  do {
    for (int i = 0; i < kPollsPerYield; ++i) {
      const T v = a.load(std::memory_order_acquire);
      if (v != old) return v;
      cpu_relax();
    }
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < deadline);
  for (;;) {
    a.wait(old, std::memory_order_acquire);
    const T v = a.load(std::memory_order_acquire);
    if (v != old) return v;
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads, std::string name) {
  if (num_threads <= 0) num_threads = (int)std::max(1u, std::thread::hardware_concurrency());
  num_threads_ = num_threads;
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, i, name] {
      set_thread_name(name + "-" + std::to_string(i));
      worker(i);
    });
  }
}

ThreadPool::~ThreadPool() {
  generation_.store(kStop, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_task(const std::function<void(int, int)>& fn, int ith) noexcept {
  try {
    if (task_hook_) task_hook_(ith);
    fn(ith, num_threads_);
  } catch (...) {
    if (!failed_.exchange(true, std::memory_order_acq_rel)) error_ = std::current_exception();
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (num_threads_ > 1) {
    job_ = &fn;
    pending_.store(num_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
  }
  run_task(fn, 0);
  // Even after a fault every worker finishes the phase: fn and what it captures live on this
  // thread's stack until run() returns.
  for (int left = pending_.load(std::memory_order_acquire); left != 0;) {
    left = wait_change(pending_, left);
  }
  job_ = nullptr;
  if (failed_.load(std::memory_order_acquire)) {
    std::exception_ptr e = std::move(error_);
    error_ = nullptr;
    failed_.store(false, std::memory_order_relaxed);
    std::rethrow_exception(e);
  }
}

void ThreadPool::worker(int ith) {
  uint64_t seen = 0;
  for (;;) {
    seen = wait_change(generation_, seen);
    if (seen == kStop) return;
    run_task(*job_, ith);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace kvw
