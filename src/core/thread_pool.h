// core/thread_pool.h: a fixed pool of worker threads for kernels (ggml's ith/nth model).
// run(fn) calls fn(ith, nth) once on each of nth threads (the caller is thread 0) and returns
// when all are done. Threads are created once; run() never allocates.
// Owner: the thread that calls run(); run() is not re-entrant.
// Faults: an exception thrown by fn on any thread is caught there (a worker never ends the
// process with it); run() waits for every thread to finish the phase, then rethrows the first
// one on the calling thread, so the caller's error handling sees it as its own (issue 30).
//
// A forward pass is a few hundred short phases, so the start and end of a phase are
// spin-then-block barriers on atomics: a thread spins briefly (a phase is often done within
// microseconds) and only then sleeps in the kernel (C++20 atomic wait, a futex on Linux). A
// mutex + condition variable round trip per phase cost more than small models' phases.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kvw {

// Contiguous share [begin, end) of n items for thread ith of nth.
inline std::pair<int64_t, int64_t> thread_share(int64_t n, int ith, int nth) {
  return {n * ith / nth, n * (ith + 1) / nth};
}

class ThreadPool {
 public:
  // num_threads <= 0: hardware concurrency. Worker i (1..n-1) is named "<name>-<i>"; thread 0
  // is the caller.
  explicit ThreadPool(int num_threads, std::string name = "kvw-pool");
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // Rethrows (after all threads are done) the first exception any thread's fn threw.
  void run(const std::function<void(int ith, int nth)>& fn);
  // Tests only (fault injection): runs before fn on every thread of every phase; what it throws
  // is that thread's fault. Set while no run() is in progress. Empty (the default) costs a branch.
  void set_task_hook(std::function<void(int ith)> hook) { task_hook_ = std::move(hook); }

 private:
  void worker(int ith);
  // fn(ith, nth) with the task hook; an exception is kept in error_ (the first one wins).
  void run_task(const std::function<void(int, int)>& fn, int ith) noexcept;

  int num_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;  // published by generation_ (release)
  std::atomic<uint64_t> generation_{0};  // bumped to start a phase; ~0 stops the workers
  std::atomic<int> pending_{0};          // workers still running the current phase
  std::function<void(int)> task_hook_;
  // The phase's first fault: claimed by failed_, written by its claimant before it decrements
  // pending_ (so run() reads it after the phase's acquire on pending_).
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

}  // namespace kvw
