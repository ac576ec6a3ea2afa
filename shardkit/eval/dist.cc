#include "shardkit/eval/dist.h"

#include <cerrno>
#include <cstdlib>

namespace shardkit {

namespace {

struct Source {
  const char* name;
  const char* rank;
  const char* size;
  const char* local[2];  // the first one set wins; nullptr ends the list
};

constexpr Source kSources[] = {
    {"torchrun", "RANK", "WORLD_SIZE", {"LOCAL_RANK", nullptr}},
    {"openmpi",
     "OMPI_COMM_WORLD_RANK",
     "OMPI_COMM_WORLD_SIZE",
     {"OMPI_COMM_WORLD_LOCAL_RANK", nullptr}},
    {"pmi", "PMI_RANK", "PMI_SIZE", {"MPI_LOCALRANKID", "PMI_LOCAL_RANK"}},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", {"SLURM_LOCALID", nullptr}},
};

Index ParseVar(const std::string& name, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
    ThrowInvalid(name, "environment value '" + text + "' is not an integer");
  }
  return static_cast<Index>(v);
}

}  // namespace

ProcessInfo DiscoverProcess(const EnvLookup& env) {
  for (const Source& s : kSources) {
    auto rank = env(s.rank);
    auto size = env(s.size);
    if (!rank || !size) continue;
    ProcessInfo info;
    info.source = s.name;
    info.rank = ParseVar(s.rank, *rank);
    info.world_size = ParseVar(s.size, *size);
    if (info.world_size < 1) {
      ThrowInvalid(s.size, "world size " + *size + " must be at least 1");
    }
    if (info.rank < 0 || info.rank >= info.world_size) {
      ThrowInvalid(s.rank,
                   "rank " + *rank + " is outside the world [0, " + *size + ") of " + s.size);
    }
    info.local_rank = info.rank;  // one node unless the launcher says otherwise
    for (const char* local : s.local) {
      if (local == nullptr) break;
      if (auto value = env(local)) {
        info.local_rank = ParseVar(local, *value);
        if (info.local_rank < 0 || info.local_rank >= info.world_size) {
          ThrowInvalid(local, "local rank " + *value + " is outside [0, " + *size + ")");
        }
        break;
      }
    }
    return info;
  }
  return ProcessInfo{};
}

ProcessInfo DiscoverFromEnvironment() {
  return DiscoverProcess([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

}  // namespace shardkit
