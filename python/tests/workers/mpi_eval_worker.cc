// shardkit_mpi_eval_worker: a complete MPI evaluation on an EvalPlan, used by
// the multi-process tests (python/tests/test_eval_engines.py) and as an
// example of the MPI helpers.
//
//   mpirun -np 4 shardkit_mpi_eval_worker --items 1001 --batch 8
//          [--devices D] [--filter K] [--mismatch-rank R] [--fail-rank R --fail-step S]
//
// Every rank checks the plan (one collective), runs num_steps steps with one
// all-reduce per step (the masked count, standing in for a metric), "predicts"
// item * item for every slot, gathers the outputs to rank 0 and verifies
// there that unshard returned every item exactly once, in order. --filter K
// keeps only items that are not multiples of K and agrees on the step count
// with one all-reduce (dynamic counts).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/eval/eval_plan.h"
#include "shardkit/eval/mpi_eval.h"

namespace {

using shardkit::Index;

Index Flag(int argc, char** argv, const char* name, Index fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::strtoll(argv[i + 1], nullptr, 10);
  }
  return fallback;
}

void Static(shardkit::mpi::Comm& comm, Index items, Index batch, Index devices, Index mismatch_rank,
            Index fail_rank, Index fail_step) {
  shardkit::EvalOptions o;
  o.devices = devices;
  // The mismatching rank builds its plan with another batch size.
  const Index my_batch = comm.rank() == mismatch_rank ? batch + devices : batch;
  shardkit::EvalPlan plan(items, comm.size(), my_batch, o);
  comm.CheckPlan(plan);
  std::vector<Index> indices(plan.batch_size());
  std::unique_ptr<bool[]> mask(new bool[plan.batch_size()]);
  std::vector<double> outputs;
  Index seen = 0;
  for (Index step = 0; step < plan.num_steps(); ++step) {
    if (comm.rank() == fail_rank && step == fail_step) {
      throw std::runtime_error("injected failure at step " + std::to_string(step));
    }
    plan.Batch(comm.rank(), step, indices.data(), mask.get());
    Index real = 0;
    for (Index j = 0; j < plan.batch_size(); ++j) {
      real += mask[j];
      outputs.push_back(static_cast<double>(indices[j]) * static_cast<double>(indices[j]));
    }
    seen += comm.AllreduceSum(real);  // a collective every step, as a metric would be
  }
  std::vector<double> ordered = comm.GatherUnshard(plan, outputs);
  if (comm.rank() != 0) return;
  if (seen != items) throw std::runtime_error("masked count " + std::to_string(seen));
  for (Index i = 0; i < items; ++i) {
    if (ordered[i] != static_cast<double>(i) * static_cast<double>(i)) {
      throw std::runtime_error("item " + std::to_string(i) + " out of order");
    }
  }
  std::printf("OK mpi static items=%lld world=%d steps=%lld padding=%lld\n",
              static_cast<long long>(items), comm.size(), static_cast<long long>(plan.num_steps()),
              static_cast<long long>(plan.TotalPadding()));
}

// Dynamic counts: each rank filters its own share, then one all-reduce.
void Dynamic(shardkit::mpi::Comm& comm, Index items, Index batch, Index k) {
  shardkit::EvalPlan plan(items, comm.size(), 1);
  std::vector<Index> kept;
  for (Index e = 0; e < plan.Real(comm.rank()); ++e) {
    Index item;
    bool real;
    plan.Batch(comm.rank(), e, &item, &real);
    if (item % k != 0) kept.push_back(item);
  }
  const Index steps = comm.AgreeSteps(static_cast<Index>(kept.size()), batch);
  Index seen = 0, sum = 0;
  for (Index step = 0; step < steps; ++step) {
    Index real = 0, s = 0;
    for (Index j = step * batch; j < (step + 1) * batch; ++j) {
      if (j < static_cast<Index>(kept.size())) ++real, s += kept[j];
    }
    seen += comm.AllreduceSum(real);
    sum += comm.AllreduceSum(s);
  }
  if (comm.rank() != 0) return;
  Index want = 0, want_sum = 0;
  for (Index i = 0; i < items; ++i) {
    if (i % k != 0) ++want, want_sum += i;
  }
  if (seen != want || sum != want_sum) throw std::runtime_error("dynamic coverage wrong");
  std::printf("OK mpi dynamic items=%lld kept=%lld steps=%lld\n", static_cast<long long>(items),
              static_cast<long long>(want), static_cast<long long>(steps));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    shardkit::mpi::Comm comm(MPI_COMM_WORLD,
                             static_cast<double>(Flag(argc, argv, "--timeout", 30)));
    const Index items = Flag(argc, argv, "--items", 1001);
    const Index batch = Flag(argc, argv, "--batch", 8);
    const Index devices = Flag(argc, argv, "--devices", 1);
    const Index filter = Flag(argc, argv, "--filter", 0);
    const Index mismatch = Flag(argc, argv, "--mismatch-rank", -1);
    const Index fail_rank = Flag(argc, argv, "--fail-rank", -1);
    const Index fail_step = Flag(argc, argv, "--fail-step", 0);
    status = shardkit::mpi::RunGuarded(comm, [&](shardkit::mpi::Comm& c) {
      if (filter > 0) {
        Dynamic(c, items, batch, filter);
      } else {
        Static(c, items, batch, devices, mismatch, fail_rank, fail_step);
      }
    });
  }
  MPI_Finalize();
  return status;
}
