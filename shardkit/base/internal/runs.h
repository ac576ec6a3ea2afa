// AppendRuns: the runs of equal neighbours in a sorted sequence, as (value,
// count) pairs: a packing pattern's copies per length, a plan's ranks per
// load.
//
// Thread-safety: a pure function over its arguments.
#ifndef SHARDKIT_BASE_INTERNAL_RUNS_H_
#define SHARDKIT_BASE_INTERNAL_RUNS_H_

#include <vector>

namespace shardkit::internal {

// Appends each run of equal neighbours of `values` to `runs` as Run{value,
// count}; a first value equal to the value of runs->back() extends that run.
// Run is a pair or an aggregate of two members (value, count).
template <typename Run, typename Values>
void AppendRuns(const Values& values, std::vector<Run>* runs) {
  for (const auto& v : values) {
    if (!runs->empty()) {
      auto& [value, count] = runs->back();
      if (value == v) {
        ++count;
        continue;
      }
    }
    runs->push_back({v, 1});
  }
}

}  // namespace shardkit::internal

#endif  // SHARDKIT_BASE_INTERNAL_RUNS_H_
