// MPI helpers for EvalPlan (target shardkit_mpi, built only when CMake finds
// MPI): one collective to check the plan, one to agree on dynamic step
// counts, all-reduces of counts, gathering outputs, and failing fast.
//
// Fail fast: every collective here is started non-blocking and waited on by
// polling, which also watches for a failure message from any rank. A rank
// that fails calls Fail(reason) (RunGuarded does it for any exception): the
// reason goes to every other rank, whose pending or next collective throws
// RemoteFailure("rank R failed: reason"); RunGuarded prints it and the job
// ends with MPI_Abort. A collective still incomplete after `timeout_s`
// throws as well, so no rank waits forever.
//
// Thread-safety: one Comm per thread that calls MPI (MPI_THREAD_FUNNELED).
#ifndef SHARDKIT_EVAL_MPI_EVAL_H_
#define SHARDKIT_EVAL_MPI_EVAL_H_

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/eval/eval_plan.h"

namespace shardkit::mpi {

// Another rank failed; what() names it and its reason.
struct RemoteFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The plans of the ranks differ; thrown on every rank.
struct PlanMismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Comm {
 public:
  // REQUIRES: MPI is initialised. `timeout_s` bounds every wait.
  explicit Comm(MPI_Comm comm = MPI_COMM_WORLD, double timeout_s = 60.0);

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }

  [[nodiscard]] Index AllreduceSum(Index value);
  [[nodiscard]] Index AllreduceMax(Index value);
  [[nodiscard]] std::vector<std::uint64_t> Allgather(std::uint64_t value);

  // One collective: throws PlanMismatch on every rank unless all ranks hold
  // the same plan fingerprint, and invalid_argument naming world_size when
  // the plan's world is not this communicator's size.
  void CheckPlan(const EvalPlan& plan);

  // Dynamic counts: one all-reduce max; every rank returns
  // ceil(max local_count / batch_size).
  [[nodiscard]] Index AgreeSteps(Index local_count, Index batch_size);

  // Gathers `width` doubles per slot from every rank to `root` and returns,
  // on root, one row of `width` per item in item order (padded slots
  // dropped); other ranks get an empty vector. Throws invalid_argument naming
  // outputs unless local.size() == num_steps * batch_size * width.
  [[nodiscard]] std::vector<double> GatherUnshard(const EvalPlan& plan,
                                                  const std::vector<double>& local, Index width = 1,
                                                  int root = 0);

  // Sends `reason` to every other rank, prints it, waits up to `grace_s` so
  // the others can report it too, and aborts the job.
  [[noreturn]] void Fail(const std::string& reason, double grace_s = 2.0);

 private:
  // One Index reduced over the ranks by `op` (what: the collective's name in
  // a timeout message).
  Index Allreduce(Index value, MPI_Op op, const char* what);
  void Wait(MPI_Request* request, const char* what);

  MPI_Comm comm_;
  double timeout_s_;
  int rank_ = 0, size_ = 1;
};

// Runs body(comm). Returns 0 when body returns; 3 after printing a
// PlanMismatch (every rank sees it, no collective is left pending, so the
// caller can MPI_Finalize); on a RemoteFailure prints it and aborts the job;
// on any other exception calls comm.Fail(what).
int RunGuarded(Comm& comm, const std::function<void(Comm&)>& body);

}  // namespace shardkit::mpi

#endif  // SHARDKIT_EVAL_MPI_EVAL_H_
