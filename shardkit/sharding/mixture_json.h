// The JSON codec of a mixture's plan and of its state (Mixture::State), the
// one codec the Python package and the mixture loader's state use.
//
// A plan (PLAN) is the object
//   {"sizes": [...], "weights": ["0.5", ...], "by": "samples", "tokens": [...],
//    "block": null or B, "seed": S, "schedule": [[position, [weight, ...]], ...],
//    "interpolation": "step", "schedule_unit": "samples", "repeat": [bool, ...],
//    "origin": O, "start": [...], "skip": K}
// Weights are strings: the shortest text that reads back as the same double
// (the core's JSON holds integers only, base/json.h).
//
// A mixture state (version 3) is sealed by the rule of every state kind
// (base/json.h, "Sealed states"):
//   {"version": 3, "kind": "mixture", "position": P, "consumed": [...],
//    PLAN's fields, "fingerprint": "<16 hex>", "checksum": "<16 hex>"}
// "fingerprint" hashes what the state belongs to: the sources (sizes, tokens,
// repeat), by and seed; "checksum" the whole content. New weights or a new
// schedule are arguments of Mixture::FromState, never edits of the state: an
// edited consumed count, seed, block, size or weight is refused before use.
// Version 1 and 2 states (version 1: other per-block orders; version 2: no
// checksum) are refused naming the version.
//
// Thread-safety: pure functions.
#ifndef SHARDKIT_SHARDING_MIXTURE_JSON_H_
#define SHARDKIT_SHARDING_MIXTURE_JSON_H_

#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/json.h"
#include "shardkit/sharding/mixture.h"

namespace shardkit {

inline constexpr int kMixtureStateVersion = 3;

// PLAN's fields, appended to the object `out`.
void AppendMixturePlan(const std::vector<Index>& sizes, const std::vector<double>& weights,
                       const MixtureOptions& options, Json* out);
// Reads PLAN's fields of `object` (other keys are the caller's to check).
// Throws invalid_argument "<path>: <field>: ..." naming the field.
void ReadMixturePlan(const Json& object, const std::string& path, std::vector<Index>* sizes,
                     std::vector<double>* weights, MixtureOptions* options);
// The canonical text (as an object) of the plan `object` holds: its fields
// read and written again, nothing built (what a reader seals against before
// it builds anything). Throws as ReadMixturePlan, or for an unknown key.
[[nodiscard]] Json CanonicalMixturePlan(const Json& object, const std::string& path);
// The plan of a mixture as one object, and the mixture it describes (built
// and validated; a bad plan is refused naming `path`).
[[nodiscard]] Json MixturePlanJson(const Mixture& mixture);
[[nodiscard]] Mixture MixtureFromPlanJson(const Json& object, const std::string& path);

// The sealed version-3 text of `state`, and its reader (the version, the
// fields, the checksum and the fingerprint, before anything is used).
// Throws invalid_argument naming `state`.
[[nodiscard]] std::string MixtureStateToJson(const MixtureState& state);
[[nodiscard]] MixtureState MixtureStateFromJson(std::string_view text);

}  // namespace shardkit

#endif  // SHARDKIT_SHARDING_MIXTURE_JSON_H_
