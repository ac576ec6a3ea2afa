// A fixed pool of threads that runs one parallel loop at a time:
// ParallelFor(n, fn) calls fn(i) for every i in [0, n) on the pool's threads
// and the caller's, and returns when all have returned. fn must not throw.
//
// Thread-safety: ParallelFor from one thread at a time.
#ifndef SHARDKIT_LOADER_INTERNAL_THREAD_POOL_H_
#define SHARDKIT_LOADER_INTERNAL_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace shardkit::internal {

class ThreadPool {
 public:
  // threads - 1 helper threads are started (the caller is the last one).
  explicit ThreadPool(int threads) {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this] { Work(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void ParallelFor(std::int64_t n, const std::function<void(std::int64_t)>& fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      n_ = n;
      next_.store(0);
      active_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    Run(fn, n);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return active_ == 0; });
    fn_ = nullptr;
  }

 private:
  void Run(const std::function<void(std::int64_t)>& fn, std::int64_t n) {
    for (std::int64_t i = next_.fetch_add(1); i < n; i = next_.fetch_add(1)) fn(i);
  }
  void Work() {
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(std::int64_t)>* fn;
      std::int64_t n;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        fn = fn_;
        n = n_;
      }
      Run(*fn, n);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (--active_ == 0) done_.notify_one();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(std::int64_t)>* fn_ = nullptr;
  std::int64_t n_ = 0;
  std::atomic<std::int64_t> next_{0};
  int active_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace shardkit::internal

#endif  // SHARDKIT_LOADER_INTERNAL_THREAD_POOL_H_
