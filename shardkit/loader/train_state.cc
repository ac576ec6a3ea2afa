// The train state's JSON codec (train_plan.h: TrainState).
#include <string>

#include "shardkit/base/hash.h"
#include "shardkit/base/json.h"
#include "shardkit/loader/train_plan.h"

namespace shardkit {

namespace {

// Every field of a train state but "checksum", in the order of the format.
Json TrainStateBody(const TrainState& s) {
  Json d = Json::MakeObject();
  d.Set("version", Json::Int(kTrainStateVersion));
  d.Set("kind", Json::String("train_plan"));
  d.Set("epoch", Json::Uint(s.epoch));
  d.Set("position", Json::Int(s.position));
  d.Set("stream", Json::String(HexDigest(s.stream)));
  return d;
}

}  // namespace

std::string TrainStateToJson(const TrainState& state) { return SealState(TrainStateBody(state)); }

TrainState TrainStateFromJson(std::string_view json) {
  const Json d = ParseJson(json, "state");
  ExpectType(d, "state", Json::Type::kObject);
  ExpectOnlyKeys(d, "state", {"version", "kind", "epoch", "position", "stream", "checksum"});
  const std::string& kind = AsString(Field(d, "state", "kind"), "state.kind");
  if (kind != "train_plan") ThrowAtPath("state.kind", "'" + kind + "' is not a train_plan state");
  ExpectStateVersion(d, "state", kTrainStateVersion, "train_plan",
                     "version 1 had no checksum, and its stream fingerprint covered the "
                     "document lengths only, not the data; version 2's stream fingerprint "
                     "was another hash of the same fields");
  TrainState s;
  s.epoch = AsUint64(Field(d, "state", "epoch"), "state.epoch");
  s.position = AsInt64(Field(d, "state", "position"), "state.position");
  s.stream = ReadHexField(d, "state", "stream");
  CheckStateSeal(d, "state", TrainStateBody(s));
  if (s.position < 0) ThrowAtPath("state.position", "must not be negative, got " + Str(s.position));
  CheckEpoch("state.epoch", s.epoch);
  return s;
}

}  // namespace shardkit
