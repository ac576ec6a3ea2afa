#include "shardkit/eval/mpi_eval.h"

#include <chrono>
#include <cstdio>
#include <thread>

namespace shardkit::mpi {

namespace {

constexpr int kFailTag = 0x5eed;

double Now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Comm::Comm(MPI_Comm comm, double timeout_s) : comm_(comm), timeout_s_(timeout_s) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

void Comm::Wait(MPI_Request* request, const char* what) {
  const double deadline = Now() + timeout_s_;
  for (int spins = 0;; ++spins) {
    int done = 0;
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    int pending = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kFailTag, comm_, &pending, &status);
    if (pending) {
      int length = 0;
      MPI_Get_count(&status, MPI_CHAR, &length);
      std::string reason(static_cast<size_t>(length), '\0');
      MPI_Recv(reason.data(), length, MPI_CHAR, status.MPI_SOURCE, kFailTag, comm_,
               MPI_STATUS_IGNORE);
      throw RemoteFailure("rank " + std::to_string(status.MPI_SOURCE) + " failed: " + reason +
                          " (seen by rank " + std::to_string(rank_) + " in " + what + ")");
    }
    if (Now() > deadline) {
      throw std::runtime_error(std::string(what) + " did not complete within " +
                               std::to_string(timeout_s_) + " s on rank " + std::to_string(rank_) +
                               " (a rank is missing or stuck)");
    }
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Index Comm::Allreduce(Index value, MPI_Op op, const char* what) {
  long long in = value, out = 0;
  MPI_Request r;
  MPI_Iallreduce(&in, &out, 1, MPI_LONG_LONG, op, comm_, &r);
  Wait(&r, what);
  return out;
}

Index Comm::AllreduceSum(Index value) { return Allreduce(value, MPI_SUM, "allreduce(sum)"); }

Index Comm::AllreduceMax(Index value) { return Allreduce(value, MPI_MAX, "allreduce(max)"); }

std::vector<std::uint64_t> Comm::Allgather(std::uint64_t value) {
  std::vector<std::uint64_t> out(static_cast<size_t>(size_));
  MPI_Request r;
  MPI_Iallgather(&value, 1, MPI_UINT64_T, out.data(), 1, MPI_UINT64_T, comm_, &r);
  Wait(&r, "allgather");
  return out;
}

void Comm::CheckPlan(const EvalPlan& plan) {
  // The fingerprints are exchanged first, so a rank whose world_size is
  // wrong still takes part in the one collective and every rank learns it.
  const std::string mismatch = CompareFingerprints(Allgather(plan.Fingerprint()));
  if (!mismatch.empty()) {
    throw PlanMismatch(mismatch + " (this is rank " + std::to_string(rank_) + " with " +
                       plan.Describe() + ")");
  }
  if (plan.world_size() != size_) {
    ThrowInvalid("world_size", "the plan has world_size " + std::to_string(plan.world_size()) +
                                   " but the MPI communicator has " + std::to_string(size_) +
                                   " ranks");
  }
}

Index Comm::AgreeSteps(Index local_count, Index batch_size) {
  CheckAtLeast("local_count", local_count, 0);
  CheckAtLeast("batch_size", batch_size, 1);
  return StepsForCount(AllreduceMax(local_count), batch_size);
}

std::vector<double> Comm::GatherUnshard(const EvalPlan& plan, const std::vector<double>& local,
                                        Index width, int root) {
  CheckAtLeast("width", width, 1);
  const Index rows = plan.num_steps() * plan.batch_size();
  const Index expected = CheckedMul("width", rows, width);
  if (static_cast<Index>(local.size()) != expected) {
    ThrowInvalid("outputs", "rank " + std::to_string(rank_) + " has " +
                                std::to_string(local.size()) + " values, expected " +
                                std::to_string(expected) + " (num_steps x batch_size x width)");
  }
  std::vector<double> all(rank_ == root ? static_cast<size_t>(expected) * size_ : 0);
  MPI_Request r;
  MPI_Igather(local.data(), static_cast<int>(expected), MPI_DOUBLE, all.data(),
              static_cast<int>(expected), MPI_DOUBLE, root, comm_, &r);
  Wait(&r, "gather");
  if (rank_ != root) return {};
  std::vector<double> out;
  out.reserve(static_cast<size_t>(plan.num_items() * width));
  for (Index row : plan.SourceRows()) {
    out.insert(out.end(), all.begin() + row * width, all.begin() + (row + 1) * width);
  }
  return out;
}

void Comm::Fail(const std::string& reason, double grace_s) {
  std::vector<MPI_Request> sends;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    sends.emplace_back();
    MPI_Isend(reason.data(), static_cast<int>(reason.size()), MPI_CHAR, r, kFailTag, comm_,
              &sends.back());
  }
  std::fprintf(stderr, "shardkit: rank %d failed: %s\n", rank_, reason.c_str());
  std::fflush(stderr);
  const double deadline = Now() + grace_s;
  while (Now() < deadline) {
    int done = 0;
    MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  MPI_Abort(comm_, 1);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

int RunGuarded(Comm& comm, const std::function<void(Comm&)>& body) {
  try {
    body(comm);
    return 0;
  } catch (const RemoteFailure& e) {
    std::fprintf(stderr, "shardkit: rank %d stopping: %s\n", comm.rank(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  } catch (const PlanMismatch& e) {
    // Every rank saw the same gathered fingerprints and throws the same way.
    // Every rank saw the same gathered fingerprints and fails the same way, with
    // no collective pending: the job can end normally with a non-zero status.
    std::fprintf(stderr, "shardkit: rank %d: %s\n", comm.rank(), e.what());
    std::fflush(stderr);
    return 3;
  } catch (const std::exception& e) {
    comm.Fail(e.what());
  }
  return 1;
}

}  // namespace shardkit::mpi
