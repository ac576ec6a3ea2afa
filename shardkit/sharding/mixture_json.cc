#include "shardkit/sharding/mixture_json.h"

#include <charconv>
#include <stdexcept>
#include <utility>

#include "shardkit/base/errors.h"
#include "shardkit/base/hash.h"

namespace shardkit {

namespace {

constexpr std::uint64_t kMixtureDomain = 0x736b2d6d69780004ULL;  // "sk-mix"

std::string WeightText(double w) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, w);
  return std::string(buf, r.ptr);
}

double ParseWeight(const Json& v, const std::string& path) {
  const std::string& text = AsString(v, path);
  double w = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), w);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size()) {
    ThrowAtPath(path, "\"" + text + "\" is not a number");
  }
  return w;
}

Json IndexList(const std::vector<Index>& values) {
  Json a = Json::MakeArray();
  for (Index v : values) a.Push(Json::Int(v));
  return a;
}

Json WeightList(const std::vector<double>& values) {
  Json a = Json::MakeArray();
  for (double v : values) a.Push(Json::String(WeightText(v)));
  return a;
}

std::vector<Index> ReadIndexList(const Json& v, const std::string& path) {
  return ReadList(v, path, [](const Json& e, const std::string& at) { return AsInt64(e, at); });
}

std::vector<double> ReadWeightList(const Json& v, const std::string& path) {
  return ReadList(v, path, [](const Json& e, const std::string& at) { return ParseWeight(e, at); });
}

// What a mixture state belongs to: its sources and their walks.
std::uint64_t SourcesFingerprint(const MixtureState& s) {
  Hasher h(kMixtureDomain);
  h.Add(s.sizes.size());
  for (Index n : s.sizes) h.Add(static_cast<std::uint64_t>(n));
  h.Add(s.options.tokens.size());
  for (Index n : s.options.tokens) h.Add(static_cast<std::uint64_t>(n));
  h.Add(s.options.repeat.size());
  for (bool r : s.options.repeat) h.Add(r ? 1 : 0);
  h.Add(static_cast<std::uint64_t>(s.options.by));
  h.Add(s.options.seed);
  return h.Finish();
}

// Every field of a mixture state but "checksum", in the order of the format.
Json MixtureStateBody(const MixtureState& s) {
  Json d = Json::MakeObject();
  d.Set("version", Json::Int(kMixtureStateVersion));
  d.Set("kind", Json::String("mixture"));
  d.Set("position", Json::Int(s.position));
  d.Set("consumed", IndexList(s.consumed));
  AppendMixturePlan(s.sizes, s.weights, s.options, &d);
  d.Set("fingerprint", Json::String(HexDigest(SourcesFingerprint(s))));
  return d;
}

}  // namespace

void AppendMixturePlan(const std::vector<Index>& sizes, const std::vector<double>& weights,
                       const MixtureOptions& o, Json* out) {
  Json& j = *out;
  j.Set("sizes", IndexList(sizes));
  j.Set("weights", WeightList(weights));
  j.Set("by", Json::String(std::string(MixByName(o.by))));
  j.Set("tokens", IndexList(o.tokens));
  j.Set("block", o.block.has_value() ? Json::Int(*o.block) : Json());
  j.Set("seed", Json::Uint(o.seed));
  Json schedule = Json::MakeArray();
  for (const SchedulePoint& p : o.schedule) {
    Json point = Json::MakeArray();
    point.Push(Json::Int(p.position));
    point.Push(WeightList(p.weights));
    schedule.Push(std::move(point));
  }
  j.Set("schedule", std::move(schedule));
  j.Set("interpolation", Json::String(std::string(InterpolationName(o.interpolation))));
  j.Set("schedule_unit", Json::String(std::string(MixByName(o.schedule_unit))));
  Json repeat = Json::MakeArray();
  for (bool r : o.repeat) repeat.Push(Json::Bool(r));
  j.Set("repeat", std::move(repeat));
  j.Set("origin", Json::Int(o.origin));
  j.Set("start", IndexList(o.start));
  j.Set("skip", Json::Int(o.skip));
}

void ReadMixturePlan(const Json& j, const std::string& path, std::vector<Index>* sizes,
                     std::vector<double>* weights, MixtureOptions* options) {
  ExpectType(j, path, Json::Type::kObject);
  MixtureOptions& o = *options;
  *sizes = ReadIndexList(Field(j, path, "sizes"), path + ".sizes");
  *weights = ReadWeightList(Field(j, path, "weights"), path + ".weights");
  o.by = ParseMixBy(AsString(Field(j, path, "by"), path + ".by"), path);
  o.tokens = ReadIndexList(Field(j, path, "tokens"), path + ".tokens");
  const Json& block = Field(j, path, "block");
  if (block.type() != Json::Type::kNull) o.block = AsInt64(block, path + ".block");
  o.seed = AsUint64(Field(j, path, "seed"), path + ".seed");
  const Json::Array& schedule = AsArray(Field(j, path, "schedule"), path + ".schedule");
  for (std::size_t i = 0; i < schedule.size(); ++i) {
    const std::string at = path + ".schedule[" + std::to_string(i) + "]";
    const Json::Array& point = AsArray(schedule[i], at);
    if (point.size() != 2) ThrowAtPath(at, "expected [position, weights]");
    o.schedule.push_back({AsInt64(point[0], at + "[0]"), ReadWeightList(point[1], at + "[1]")});
  }
  o.interpolation =
      ParseInterpolation(AsString(Field(j, path, "interpolation"), path + ".interpolation"));
  o.schedule_unit =
      ParseMixBy(AsString(Field(j, path, "schedule_unit"), path + ".schedule_unit"), path);
  o.repeat = ReadList(Field(j, path, "repeat"), path + ".repeat",
                      [](const Json& e, const std::string& at) { return AsBool(e, at); });
  o.origin = AsInt64(Field(j, path, "origin"), path + ".origin");
  o.start = ReadIndexList(Field(j, path, "start"), path + ".start");
  o.skip = AsInt64(Field(j, path, "skip"), path + ".skip");
}

namespace {

// The parts of a plan object: its sources' sizes and weights, and the options.
struct PlanParts {
  std::vector<Index> sizes;
  std::vector<double> weights;
  MixtureOptions options;
};

}  // namespace

// A plan object on its own (no state fields around it): exactly its keys.
static PlanParts ReadStandalonePlan(const Json& j, const std::string& path) {
  ExpectOnlyKeys(j, path,
                 {"sizes", "weights", "by", "tokens", "block", "seed", "schedule", "interpolation",
                  "schedule_unit", "repeat", "origin", "start", "skip"});
  PlanParts p;
  ReadMixturePlan(j, path, &p.sizes, &p.weights, &p.options);
  return p;
}

Json MixturePlanJson(const Mixture& m) {
  Json j = Json::MakeObject();
  AppendMixturePlan(m.sizes(), m.weights(), m.options(), &j);
  return j;
}

Json CanonicalMixturePlan(const Json& j, const std::string& path) {
  const PlanParts p = ReadStandalonePlan(j, path);
  Json out = Json::MakeObject();
  AppendMixturePlan(p.sizes, p.weights, p.options, &out);
  return out;
}

Mixture MixtureFromPlanJson(const Json& j, const std::string& path) {
  PlanParts p = ReadStandalonePlan(j, path);
  try {
    return Mixture(std::move(p.sizes), std::move(p.weights), std::move(p.options));
  } catch (const std::invalid_argument& e) {
    ThrowAtPath(path, std::string("not a valid mixture (") + e.what() + ")");
  }
}

std::string MixtureStateToJson(const MixtureState& state) {
  return SealState(MixtureStateBody(state));
}

MixtureState MixtureStateFromJson(std::string_view text) {
  const Json d = ParseJson(text, "state");
  ExpectType(d, "state", Json::Type::kObject);
  const std::string& kind = AsString(Field(d, "state", "kind"), "state.kind");
  if (kind != "mixture") ThrowAtPath("state.kind", "'" + kind + "' is not a mixture state");
  ExpectStateVersion(d, "state", kMixtureStateVersion, "mixture",
                     "version 1 mixtures had other per-block orders, and version 2 states had "
                     "no checksum, so such a state cannot be resumed exactly");
  ExpectOnlyKeys(d, "state",
                 {"version", "kind", "position", "consumed", "sizes", "weights", "by", "tokens",
                  "block", "seed", "schedule", "interpolation", "schedule_unit", "repeat", "origin",
                  "start", "skip", "fingerprint", "checksum"});
  MixtureState s;
  s.position = AsInt64(Field(d, "state", "position"), "state.position");
  s.consumed = ReadIndexList(Field(d, "state", "consumed"), "state.consumed");
  ReadMixturePlan(d, "state", &s.sizes, &s.weights, &s.options);
  const std::uint64_t fingerprint = ReadHexField(d, "state", "fingerprint");
  CheckStateSeal(d, "state", MixtureStateBody(s));
  if (fingerprint != SourcesFingerprint(s)) {
    ThrowAtPath("state.fingerprint",
                "does not match the state's sources (sizes, tokens, repeat, "
                "by and seed)");
  }
  return s;
}

}  // namespace shardkit
