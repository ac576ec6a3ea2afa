// A fixed pool of threads that runs one parallel loop at a time:
// ParallelFor(n, fn) calls fn(i) for every i in [0, n) on the pool's threads
// and the caller's, and returns when all have returned. fn must not throw.
//
// Fork: only the forking thread survives fork() (a torch DataLoader worker
// inherits the parent's objects this way), so a pool used in a child process
// abandons the parent's workers and their state (leaked, never joined: their
// threads do not exist there, and a mutex may have been copied locked) and
// starts its own.
//
// Thread-safety: ParallelFor from one thread at a time.
#ifndef SHARDKIT_LOADER_INTERNAL_THREAD_POOL_H_
#define SHARDKIT_LOADER_INTERNAL_THREAD_POOL_H_

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace shardkit::internal {

class ThreadPool {
 public:
  // threads - 1 helper threads are started (the caller is the last one).
  explicit ThreadPool(int threads) : threads_(threads) { Start(); }
  ~ThreadPool() {
    if (::getpid() != pid_) {
      Abandon();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      s_->stop = true;
    }
    s_->wake.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }

  void ParallelFor(std::int64_t n, const std::function<void(std::int64_t)>& fn) {
    if (::getpid() != pid_) {  // in a forked child: a fresh pool
      Abandon();
      Start();
    }
    Shared& s = *s_;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.fn = &fn;
      s.n = n;
      s.next.store(0);
      s.active = static_cast<int>(workers_.size());
      ++s.generation;
    }
    s.wake.notify_all();
    Run(s, fn, n);
    std::unique_lock<std::mutex> lock(s.mu);
    s.done.wait(lock, [&s] { return s.active == 0; });
    s.fn = nullptr;
  }

 private:
  struct Shared {
    std::mutex mu;
    std::condition_variable wake, done;
    const std::function<void(std::int64_t)>* fn = nullptr;
    std::int64_t n = 0;
    std::atomic<std::int64_t> next{0};
    int active = 0;
    std::uint64_t generation = 0;
    bool stop = false;
  };

  void Start() {
    pid_ = ::getpid();
    s_ = std::make_unique<Shared>();
    Shared* s = s_.get();
    for (int t = 1; t < threads_; ++t) workers_.emplace_back([s] { Work(*s); });
  }
  // Leaks the workers' handles and state (see the file comment).
  void Abandon() {
    for (std::thread& t : workers_) new std::thread(std::move(t));
    workers_.clear();
    (void)s_.release();
  }
  static void Run(Shared& s, const std::function<void(std::int64_t)>& fn, std::int64_t n) {
    for (std::int64_t i = s.next.fetch_add(1); i < n; i = s.next.fetch_add(1)) fn(i);
  }
  static void Work(Shared& s) {
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(std::int64_t)>* fn;
      std::int64_t n;
      {
        std::unique_lock<std::mutex> lock(s.mu);
        s.wake.wait(lock, [&] { return s.stop || s.generation != seen; });
        if (s.stop) return;
        seen = s.generation;
        fn = s.fn;
        n = s.n;
      }
      Run(s, *fn, n);
      {
        std::lock_guard<std::mutex> lock(s.mu);
        if (--s.active == 0) s.done.notify_one();
      }
    }
  }

  int threads_;
  pid_t pid_ = 0;
  std::unique_ptr<Shared> s_;
  std::vector<std::thread> workers_;
};

}  // namespace shardkit::internal

#endif  // SHARDKIT_LOADER_INTERNAL_THREAD_POOL_H_
