#include "shardkit/loader/host_plan.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "shardkit/base/atomic_file.h"
#include "shardkit/base/errors.h"
#include "shardkit/base/hash.h"
#include "shardkit/loader/internal/train_reader.h"
#include "shardkit/loader/train_plan.h"

namespace shardkit {

namespace {

// The file's layout, in little-endian 64-bit words (the host's own order: a
// file in one host's shared memory is read on that host only).
//
//   header   kMagic, kVersion, key, total words, W, rows_per_rank, num_steps,
//            the summary (kSummaryWords), section offsets [W + 1] (words from
//            the file's start), section checksums [W], the header checksum
//            (over every header word before it)
//   section  of rank r: index [num_steps + 1] (words from the section's
//            start), then per step: tokens, filler_rows, cost, imbalance
//            (double bits), then rows_per_rank rows: epoch, pack, n, and n
//            pieces of (item, length, images, start)
constexpr std::uint64_t kMagic = 0x314e414c5048534bULL;  // "KSHPLAN1"
constexpr std::uint64_t kVersion = 1;
constexpr std::size_t kFixedWords = 7;
constexpr std::size_t kSummaryWords = 18;

std::uint64_t Bits(double v) { return std::bit_cast<std::uint64_t>(v); }
double Double(std::uint64_t v) { return std::bit_cast<double>(v); }

std::uint64_t Checksum(const std::uint64_t* words, std::size_t n, std::uint64_t domain) {
  Hasher h(domain);
  h.AddArray(words, n);
  return h.Finish();
}

void PutSummary(const TrainSummary& s, std::vector<std::uint64_t>* out) {
  const Index ints[] = {s.num_steps,      s.packs,           s.stream_packs,    s.tokens,
                        s.pieces,         s.split_documents, s.dropped,         s.dropped_packs,
                        s.dropped_tokens, s.filler_rows,     s.next_epoch_rows, s.lower_bound};
  for (Index v : ints) out->push_back(static_cast<std::uint64_t>(v));
  out->push_back(Bits(s.max_step_imbalance));
  out->push_back(Bits(s.max_full_step_imbalance));
  out->push_back(Bits(s.mean_step_imbalance));
  out->push_back(s.end.epoch);
  out->push_back(static_cast<std::uint64_t>(s.end.position));
  out->push_back(s.end.stream);
}

TrainSummary GetSummary(const std::uint64_t* w) {
  TrainSummary s;
  Index* ints[] = {&s.num_steps,      &s.packs,           &s.stream_packs,    &s.tokens,
                   &s.pieces,         &s.split_documents, &s.dropped,         &s.dropped_packs,
                   &s.dropped_tokens, &s.filler_rows,     &s.next_epoch_rows, &s.lower_bound};
  for (Index* v : ints) *v = static_cast<Index>(*w++);
  s.max_step_imbalance = Double(*w++);
  s.max_full_step_imbalance = Double(*w++);
  s.mean_step_imbalance = Double(*w++);
  s.end.epoch = *w++;
  s.end.position = static_cast<Index>(*w++);
  s.end.stream = *w++;
  return s;
}

void PutStep(const TrainStep& step, std::vector<std::uint64_t>* out) {
  out->push_back(static_cast<std::uint64_t>(step.tokens));
  out->push_back(static_cast<std::uint64_t>(step.filler_rows));
  out->push_back(Bits(step.cost));
  out->push_back(Bits(step.imbalance));
  for (std::size_t r = 0; r < step.rows.size(); ++r) {
    out->push_back(step.row_epochs[r]);
    out->push_back(static_cast<std::uint64_t>(step.row_packs[r]));
    out->push_back(step.rows[r].size());
    for (const PackItem& p : step.rows[r]) {
      out->push_back(static_cast<std::uint64_t>(p.item));
      out->push_back(static_cast<std::uint64_t>(p.length));
      out->push_back(static_cast<std::uint64_t>(p.images));
      out->push_back(static_cast<std::uint64_t>(p.start));
    }
  }
}

std::string Str(std::uint64_t v) { return std::to_string(v); }

}  // namespace

namespace internal {

class HostPlanFile {
 public:
  HostPlanFile(std::string path, const std::uint64_t* words, std::size_t size,
               std::vector<std::uint64_t> head, Index W, Index rows_per_rank, Index num_steps)
      : path_(std::move(path)),
        words_(words),
        size_(size),
        head_(std::move(head)),
        W_(W),
        rows_(rows_per_rank),
        steps_(num_steps),
        sections_(static_cast<std::size_t>(W)),
        checked_(static_cast<std::size_t>(W), 0) {}
  ~HostPlanFile() {
    munmap(const_cast<std::uint64_t*>(words_), size_ * 8);
    // Only the file this reader mapped: a file rebuilt under the same name
    // since (another loader of the same plan) is not this one's to remove.
    struct stat st {};
    if (owner_ && finished_.load(std::memory_order_relaxed) && ::stat(path_.c_str(), &st) == 0 &&
        st.st_dev == dev_ && st.st_ino == ino_) {
      unlink(path_.c_str());
    }
  }
  HostPlanFile(const HostPlanFile&) = delete;
  HostPlanFile& operator=(const HostPlanFile&) = delete;

  // Maps `path` and checks its header and rank `rank`'s section; null (and
  // *why) when it is missing (errno ENOENT: *missing) or fails a check.
  static std::shared_ptr<HostPlanFile> Open(const std::string& path, std::uint64_t key, Index W,
                                            Index rows_per_rank, Index rank, bool* missing,
                                            std::string* why);

  [[nodiscard]] TrainSummary summary() const { return GetSummary(head_.data() + kFixedWords); }
  [[nodiscard]] Index num_steps() const { return steps_; }
  void set_owner() { owner_ = true; }
  [[nodiscard]] std::string_view bytes() const {
    return {reinterpret_cast<const char*>(words_), size_ * 8};
  }
  void set_identity(dev_t dev, ino_t ino) {
    dev_ = dev;
    ino_ = ino;
  }

  // Copies rank r's section out of the mapping and checks the copy (once);
  // false when it fails. Steps are read from the copy: the file is shared
  // and writable by others, and bytes edited or cut in place after the check
  // must neither change what was checked nor fault (SIGBUS) in a read.
  bool CheckSection(Index r, std::string* why) const;
  bool Read(Index rank, Index step, TrainStep* out) const;

 private:
  [[nodiscard]] std::size_t SectionOffsetsAt() const { return kFixedWords + kSummaryWords; }
  [[nodiscard]] std::size_t HeaderWords() const {
    return SectionOffsetsAt() + 2 * static_cast<std::size_t>(W_) + 2;
  }

  std::string path_;
  const std::uint64_t* words_;
  std::size_t size_;                 // words
  std::vector<std::uint64_t> head_;  // the checked header, copied at Open
  Index W_, rows_, steps_;
  bool owner_ = false;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  mutable std::atomic<bool> finished_{false};  // a reader went past the last step
  mutable std::mutex mu_;
  mutable std::vector<std::vector<std::uint64_t>> sections_;  // checked copies
  mutable std::vector<char> checked_;
};

std::shared_ptr<HostPlanFile> HostPlanFile::Open(const std::string& path, std::uint64_t key,
                                                 Index W, Index rows_per_rank, Index rank,
                                                 bool* missing, std::string* why) {
  *missing = false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *missing = errno == ENOENT;
    *why = std::string("cannot open: ") + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    *why = "not a regular file";
    return nullptr;
  }
  const std::size_t bytes = static_cast<std::size_t>(st.st_size);
  const std::size_t header = kFixedWords + kSummaryWords + 2 * static_cast<std::size_t>(W) + 2;
  if (bytes % 8 != 0 || bytes < header * 8) {
    ::close(fd);
    *why = "truncated: " + Str(bytes) + " bytes, the header alone needs " + Str(header * 8);
    return nullptr;
  }
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    *why = std::string("cannot map: ") + std::strerror(errno);
    return nullptr;
  }
  // Every check below reads this copy, and so does every later use: an edit
  // in place after Open cannot change a checked header.
  const std::vector<std::uint64_t> w(static_cast<const std::uint64_t*>(map),
                                     static_cast<const std::uint64_t*>(map) + header);
  const std::size_t size = bytes / 8;
  auto fail = [&](std::string what) -> std::shared_ptr<HostPlanFile> {
    munmap(map, bytes);
    *why = std::move(what);
    return nullptr;
  };
  if (w[0] != kMagic) return fail("not a shardkit host plan (magic)");
  if (w[1] != kVersion) return fail("format version " + Str(w[1]) + ", expected " + Str(kVersion));
  if (w[2] != key) return fail("made for another plan (key " + HexDigest(w[2]) + ")");
  if (Checksum(w.data(), header - 1, kMagic) != w[header - 1]) {
    return fail("header checksum mismatch");
  }
  if (w[3] != size) return fail("truncated: " + Str(size) + " words, header says " + Str(w[3]));
  if (w[4] != static_cast<std::uint64_t>(W) || w[5] != static_cast<std::uint64_t>(rows_per_rank)) {
    return fail("another world size or batch shape");
  }
  const Index steps = static_cast<Index>(w[6]);
  const std::size_t at = kFixedWords + kSummaryWords;
  for (Index r = 0; r <= W; ++r) {
    const std::uint64_t o = w[at + static_cast<std::size_t>(r)];
    const std::uint64_t prev = r == 0 ? header : w[at + static_cast<std::size_t>(r) - 1];
    if (o < prev || o > size || (r == W && o != size) ||
        (r < W && o + static_cast<std::uint64_t>(steps) + 1 > size)) {
      return fail("section offsets out of bounds");
    }
  }
  if (steps < 0 || GetSummary(w.data() + kFixedWords).num_steps != steps) {
    return fail("inconsistent step count");
  }
  auto file = std::make_shared<HostPlanFile>(path, static_cast<const std::uint64_t*>(map), size, w,
                                             W, rows_per_rank, static_cast<Index>(steps));
  file->set_identity(st.st_dev, st.st_ino);
  if (!file->CheckSection(rank, why)) return nullptr;  // the destructor unmaps
  return file;
}

bool HostPlanFile::CheckSection(Index r, std::string* why) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::size_t ur = static_cast<std::size_t>(r);
  if (checked_[ur]) return true;
  const std::size_t at = SectionOffsetsAt();
  const std::uint64_t begin = head_[at + ur], end = head_[at + ur + 1];
  const std::uint64_t sum = head_[at + static_cast<std::size_t>(W_) + 1 + ur];
  std::vector<std::uint64_t> copy(words_ + begin, words_ + end);
  if (Checksum(copy.data(), copy.size(), kMagic ^ ur) != sum) {
    *why = "checksum mismatch in rank " + Str(ur) + "'s section";
    return false;
  }
  // The index is sealed too; its entries must stay inside the section.
  const std::uint64_t n = end - begin;
  const std::uint64_t* index = copy.data();
  for (Index s = 0; s <= steps_; ++s) {
    if (index[s] > n || (s > 0 && index[s] < index[s - 1])) {
      *why = "rank " + Str(ur) + "'s step index out of bounds";
      return false;
    }
  }
  sections_[ur] = std::move(copy);
  checked_[ur] = 1;
  return true;
}

bool HostPlanFile::Read(Index rank, Index step, TrainStep* out) const {
  if (step < 0 || step >= steps_) {
    finished_.store(true, std::memory_order_relaxed);
    return false;
  }
  std::string why;
  if (!CheckSection(rank, &why)) ThrowInvalid("share_plan", "'" + path_ + "': " + why);
  const std::size_t ur = static_cast<std::size_t>(rank);
  const std::uint64_t* section = sections_[ur].data();
  const std::uint64_t* w = section + section[step];
  const std::uint64_t* end = section + section[step + 1];
  auto next = [&]() -> std::uint64_t {
    if (w >= end) ThrowInvalid("share_plan", "'" + path_ + "': a step overruns its record");
    return *w++;
  };
  out->step = step;
  out->tokens = static_cast<Index>(next());
  out->filler_rows = static_cast<Index>(next());
  out->cost = Double(next());
  out->imbalance = Double(next());
  out->rows.resize(static_cast<std::size_t>(rows_));
  out->row_epochs.resize(static_cast<std::size_t>(rows_));
  out->row_packs.resize(static_cast<std::size_t>(rows_));
  for (std::size_t r = 0; r < out->rows.size(); ++r) {
    out->row_epochs[r] = next();
    out->row_packs[r] = static_cast<Index>(next());
    const std::uint64_t n = next();
    if (n > static_cast<std::uint64_t>(end - w) / 4) {
      ThrowInvalid("share_plan", "'" + path_ + "': a row overruns its record");
    }
    std::vector<PackItem>& row = out->rows[r];
    row.resize(n);
    for (PackItem& p : row) {
      p.item = static_cast<Index>(*w++);
      p.length = static_cast<Index>(*w++);
      p.images = static_cast<Index>(*w++);
      p.start = static_cast<Index>(*w++);
    }
  }
  return true;
}

bool ReadHostStep(const HostPlanFile& file, Index rank, Index step, TrainStep* out) {
  return file.Read(rank, step, out);
}

}  // namespace internal

HostPlanOptions HostPlanOptionsFromEnvironment() {
  HostPlanOptions o;
  auto integer = [](const char* name, Index fallback) -> Index {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return fallback;
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v, &end, 10);
    if (errno != 0 || *end != '\0' || x < 0) {
      ThrowInvalid(name, std::string("must be a non-negative integer, got '") + v + "'");
    }
    return static_cast<Index>(x);
  };
  o.local_rank = integer("LOCAL_RANK", 0);
  if (const char* d = std::getenv("SHARDKIT_SHARE_PLAN_DIR"); d != nullptr && *d != '\0') {
    o.directory = d;
  }
  if (const char* t = std::getenv("SHARDKIT_SHARE_PLAN_TIMEOUT"); t != nullptr && *t != '\0') {
    char* end = nullptr;
    const double x = std::strtod(t, &end);
    // "inf" parses too: a wait without end is refused like any other bad value.
    if (*end != '\0' || !(x > 0) || !std::isfinite(x)) {
      ThrowInvalid("SHARDKIT_SHARE_PLAN_TIMEOUT",
                   std::string("must be a positive, finite number of seconds, got '") + t + "'");
    }
    o.timeout_seconds = x;
  }
  return o;
}

std::unique_ptr<TrainPlan::Reader> TrainPlan::ReadShared(Index rank, Index first,
                                                         const HostPlanOptions& host,
                                                         HostPlanInfo* info) const {
  CheckIndex("rank", rank, 0, options_.world_size);
  if (first < 0) ThrowOutOfRange("step", Str(first) + " is negative");
  CheckAtLeast("local_rank", host.local_rank, 0);
  if (!(host.timeout_seconds > 0)) {
    ThrowInvalid("timeout_seconds",
                 "must be positive, got " + std::to_string(host.timeout_seconds));
  }
  if (!lazy_ || lazy_->built.load(std::memory_order_acquire) ||
      lazy_->dealt.load(std::memory_order_acquire) != 0) {
    ThrowInvalid("share_plan", "needs a fresh Deferred plan (TrainPlan::Deferred, not yet read)");
  }
  Hasher key_hash(kMagic);
  key_hash.Add(kVersion);
  key_hash.Add(Fingerprint());
  key_hash.AddBytes(Describe());
  const std::uint64_t key = key_hash.Finish();
  const std::string path = host.directory + "/shardkit-plan-" + HexDigest(key) + ".bin";
  const Index W = options_.world_size;
  HostPlanInfo local;
  HostPlanInfo& out = info ? *info : local;
  out.path = path;

  auto attach = [&](std::shared_ptr<internal::HostPlanFile> file, bool owner) {
    if (owner) file->set_owner();
    Publish(file->summary());
    auto impl = std::make_unique<Reader::Impl>(this, rank);
    impl->host = std::move(file);
    impl->step = first;
    return std::unique_ptr<Reader>(new Reader(std::move(impl)));
  };

  bool missing = false;
  std::string why;
  if (host.local_rank == 0) {
    if (auto file =
            internal::HostPlanFile::Open(path, key, W, rows_per_rank_, rank, &missing, &why)) {
      // The other ranks read it too: every section must hold.
      bool whole = true;
      for (Index r = 0; r < W && whole; ++r) whole = file->CheckSection(r, &why);
      if (whole) {
        // Written again as a file of its own (a copy, no planning): the
        // loader that left it removes only the file it mapped, so it cannot
        // remove this one under the ranks that are about to map it.
        WriteFileAtomically(path, file->bytes(), "share_plan");
        file = internal::HostPlanFile::Open(path, key, W, rows_per_rank_, rank, &missing, &why);
        if (!file) {
          ThrowInvalid("share_plan", "'" + path + "' fails its check after writing: " + why);
        }
        out.role = "reused";
        return attach(std::move(file), true);
      }
    }
    // The one pass, every rank's steps written to its section.
    std::vector<std::vector<std::uint64_t>> sections(static_cast<std::size_t>(W));
    std::vector<std::vector<std::uint64_t>> index(static_cast<std::size_t>(W));
    {
      Reader::Impl pass(this, 0);
      pass.tally = std::make_unique<internal::Tally>(options_, rows_per_rank_, stream_);
      pass.stream.Restore(*checkpoints_[0]);
      TrainStep step;
      Index s = 0;
      while (pass.Advance()) {
        for (Index r = 0; r < W; ++r) {
          const std::size_t ur = static_cast<std::size_t>(r);
          index[ur].push_back(sections[ur].size());
          internal::FillStep(pass.deal, r, rows_per_rank_, s, &step);
          PutStep(step, &sections[ur]);
        }
        ++s;
      }
    }
    // The pass published the plan's summary.
    const TrainSummary& summary = summary_;
    std::vector<std::uint64_t> head = {kMagic,
                                       kVersion,
                                       key,
                                       0,
                                       static_cast<std::uint64_t>(W),
                                       static_cast<std::uint64_t>(rows_per_rank_),
                                       static_cast<std::uint64_t>(summary.num_steps)};
    PutSummary(summary, &head);
    const std::size_t header = head.size() + 2 * static_cast<std::size_t>(W) + 2;
    std::uint64_t at = header;
    std::vector<std::uint64_t> offsets, sums;
    for (std::size_t r = 0; r < sections.size(); ++r) {
      index[r].push_back(sections[r].size());
      const std::uint64_t idx = index[r].size();
      for (std::uint64_t& v : index[r]) v += idx;
      offsets.push_back(at);
      at += idx + sections[r].size();
    }
    offsets.push_back(at);
    head.insert(head.end(), offsets.begin(), offsets.end());
    head[3] = at;
    std::vector<std::uint64_t> section;
    std::string bytes;
    bytes.reserve(at * 8);
    for (std::size_t r = 0; r < sections.size(); ++r) {
      section = std::move(index[r]);
      section.insert(section.end(), sections[r].begin(), sections[r].end());
      std::vector<std::uint64_t>().swap(sections[r]);
      sums.push_back(Checksum(section.data(), section.size(), kMagic ^ r));
      bytes.append(reinterpret_cast<const char*>(section.data()), section.size() * 8);
    }
    head.insert(head.end(), sums.begin(), sums.end());
    head.push_back(Checksum(head.data(), head.size(), kMagic));
    bytes.insert(0, reinterpret_cast<const char*>(head.data()), head.size() * 8);
    WriteFileAtomically(path, bytes, "share_plan");
    std::string().swap(bytes);
    auto file = internal::HostPlanFile::Open(path, key, W, rows_per_rank_, rank, &missing, &why);
    if (!file) ThrowInvalid("share_plan", "'" + path + "' fails its check after writing: " + why);
    out.role = "built";
    return attach(std::move(file), true);
  }
  // Another local rank: wait for local rank 0's file.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(host.timeout_seconds);
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (auto file =
            internal::HostPlanFile::Open(path, key, W, rows_per_rank_, rank, &missing, &why)) {
      out.role = "mapped";
      return attach(std::move(file), false);
    }
    if (!missing) {
      // Never trusted: plan the epoch here, as without the shared plan.
      out.role = "recomputed";
      return ReadOnce(rank, first);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      char waited[32];
      std::snprintf(waited, sizeof waited, "%g", host.timeout_seconds);
      ThrowInvalid("share_plan", "local rank " + std::to_string(host.local_rank) + " waited " +
                                     waited + " s for '" + path +
                                     "', which local rank 0 writes (is local rank 0 running "
                                     "the same plan on this host? SHARDKIT_SHARE_PLAN_TIMEOUT "
                                     "sets the wait); the plan: " +
                                     Describe());
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace shardkit
