// core/thread_pool.h: a fixed pool of worker threads for kernels (ggml's ith/nth model).
// run(fn) calls fn(ith, nth) once on each of nth threads (the caller is thread 0) and returns
// when all are done. Threads are created once; run() never allocates.
// Owner: the thread that calls run(); run() is not re-entrant.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
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
  explicit ThreadPool(int num_threads);  // num_threads <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  void run(const std::function<void(int ith, int nth)>& fn);

 private:
  void worker(int ith);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_;
  std::condition_variable cv_done_;
  const std::function<void(int, int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace kvw
