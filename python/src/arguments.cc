// Bindings of the argument rules (bindings.h) for the package's Python
// classes, so that their arguments are checked as the bindings' own are:
// TypeError naming the parameter and the value for a wrong type (a float is
// never truncated), ValueError for an integer outside 64 bits.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <string>
#include <type_traits>
#include <vector>

#include "python/src/bindings.h"
#include "shardkit/loader/option_fields.h"
#include "shardkit/packing/context_parallel.h"
#include "shardkit/packing/packing_metadata.h"
#include "shardkit/packing/rank_balance.h"
#include "shardkit/sharding/whale.h"

namespace shardkit::python {

using namespace nb::literals;

namespace {

template <typename T>
void Convert(nb::handle value, const char* name, T* field) {
  if constexpr (std::is_same_v<T, bool>) {
    *field = ToBool(value, name);
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    *field = ToUint64(value, name);
  } else if constexpr (std::is_same_v<T, Index>) {
    *field = ToIndex(value, name);
  } else if constexpr (std::is_same_v<T, std::optional<Index>>) {
    *field = ToOptionalIndex(value, name);
  } else if constexpr (std::is_same_v<T, std::vector<double>>) {
    // None: no values (ShardPlan's weights).
    *field = value.is_none() ? std::vector<double>{} : ToDoubles(value, name);
  } else {
    *field = ParseOptionField(ToStr(value, name), field);
  }
}

template <typename T>
nb::object ToPython(const T& value) {
  if constexpr (std::is_enum_v<T>) {
    return nb::str(std::string(OptionFieldName(value)).c_str());
  } else {
    return nb::cast(value);
  }
}

// A field's Python type and its default, as a signature spells them.
template <typename T>
std::string Parameter(const char* name, const T& value) {
  std::string type, text;
  if constexpr (std::is_same_v<T, bool>) {
    type = "bool", text = value ? "True" : "False";
  } else if constexpr (std::is_same_v<T, Index> || std::is_same_v<T, std::uint64_t>) {
    type = "int", text = std::to_string(value);
  } else if constexpr (std::is_same_v<T, std::optional<Index>>) {
    type = "int | None", text = value ? std::to_string(*value) : "None";
  } else if constexpr (std::is_same_v<T, std::vector<double>>) {
    type = "numpy.typing.ArrayLike | None", text = "None";
  } else {
    type = "str", text = "'" + std::string(OptionFieldName(value)) + "'";
  }
  return std::string(name) + ": " + type + " = " + text;
}

template <typename Options>
std::string Parameters(const Options& defaults) {
  std::string out;
  VisitOptions(defaults, [&](const char* name, const auto& field) {
    out += (out.empty() ? "" : ", ") + Parameter(name, field);
  });
  return out;
}

nb::dict ToOptionsDict(nb::handle kwargs) {
  if (!nb::isinstance<nb::dict>(kwargs)) {
    throw nb::type_error(("options: expected a dict, got " + TypeAndRepr(kwargs)).c_str());
  }
  return nb::borrow<nb::dict>(kwargs);
}

template <typename Options>
void Read(nb::handle kwargs, Options* options, const char* what) {
  nb::dict given = ToOptionsDict(kwargs);
  std::size_t known = 0;
  VisitOptions(*options, [&](const char* name, auto& field) {
    if (!given.contains(name)) return;
    ++known;
    Convert(given[name], name, &field);
  });
  if (known == given.size()) return;
  for (auto [key, value] : given) {
    bool found = false;
    const std::string k = nb::cast<std::string>(nb::str(key));
    VisitOptions(*options, [&](const char* name, auto&) { found = found || k == name; });
    if (!found) ThrowInvalid(k.c_str(), std::string("not an option of ") + what);
  }
}

}  // namespace

void ReadOptions(nb::handle kwargs, TrainOptions* options, const char* what) {
  Read(kwargs, options, what);
}

void ReadOptions(nb::handle kwargs, MultimodalOptions* options, const char* what) {
  Read(kwargs, options, what);
}

void ReadOptions(nb::handle kwargs, CollateOptions* options, const char* what) {
  Read(kwargs, options, what);
}

void ReadOptions(nb::handle kwargs, ShardOptions* options, const char* what) {
  Read(kwargs, options, what);
}

void ReadOptions(nb::handle kwargs, EvalOptions* options, const char* what) {
  Read(kwargs, options, what);
}

std::string OptionParameters(const ShardOptions& defaults) { return Parameters(defaults); }
std::string OptionParameters(const EvalOptions& defaults) { return Parameters(defaults); }

void ReadOptions(nb::handle kwargs, LoaderOptions* options, const char* what) {
  nb::dict given = ToOptionsDict(kwargs);
  nb::dict rest;
  std::optional<WhalePolicy> env;
  for (auto [key, value] : given) {
    const std::string k = nb::cast<std::string>(nb::str(key));
    if (value.is_none() && (k == "whale_unbalanced_io_slicing" || k == "whale_drop_last_files")) {
      if (!env) env = WhalePolicyFromEnvironment();
      options->*(k == "whale_drop_last_files" ? &LoaderOptions::whale_drop_last_files
                                              : &LoaderOptions::whale_unbalanced_io_slicing) =
          k == "whale_drop_last_files" ? env->drop_last_files : env->unbalanced_io_slicing;
      continue;
    }
    rest[key] = value;
  }
  Read(rest, options, what);
}

nb::dict WriteOptions(const LoaderOptions& options) {
  nb::dict out;
  VisitOptions(options, [&](const char* name, const auto& field) { out[name] = ToPython(field); });
  return out;
}

void init_arguments(nb::module_& m) {
  // LoaderOptions' fields and their defaults (the core's, written once in
  // loader.h): shardkit.TokenLoader passes the arguments of these names to
  // the core as they are, and the Python loaders' signatures read the
  // defaults they spell from here (equal_steps).
  const nb::dict defaults = WriteOptions(LoaderOptions{});
  nb::list names;
  for (auto [key, value] : defaults) names.append(key);
  m.attr("_loader_option_names") = nb::tuple(names);
  m.attr("_loader_option_defaults") = defaults;
  m.def(
      "_index", [](nb::handle v, const std::string& name) { return ToIndex(v, name.c_str()); },
      nb::sig("def _index(value: typing.Any, name: str) -> int"), "value"_a.none(), "name"_a);
  m.def(
      "_optional_index",
      [](nb::handle v, const std::string& name) { return ToOptionalIndex(v, name.c_str()); },
      nb::sig("def _optional_index(value: typing.Any, name: str) -> int | None"), "value"_a.none(),
      "name"_a);
  m.def(
      "_uint64", [](nb::handle v, const std::string& name) { return ToUint64(v, name.c_str()); },
      nb::sig("def _uint64(value: typing.Any, name: str) -> int"), "value"_a.none(), "name"_a);
  m.def(
      "_str", [](nb::handle v, const std::string& name) { return ToStr(v, name.c_str()); },
      nb::sig("def _str(value: typing.Any, name: str) -> str"), "value"_a.none(), "name"_a);
  m.def(
      "_bool", [](nb::handle v, const std::string& name) { return ToBool(v, name.c_str()); },
      nb::sig("def _bool(value: typing.Any, name: str) -> bool"), "value"_a.none(), "name"_a);
  m.def(
      "_str_mapping",
      [](nb::handle v, const std::string& name) {
        nb::dict out;
        for (const auto& [key, value] : ToStrMapping(v, name.c_str())) {
          out[nb::str(key.c_str())] = nb::str(value.c_str());
        }
        return out;
      },
      nb::sig("def _str_mapping(value: typing.Any, name: str) -> dict[str, str]"), "value"_a.none(),
      "name"_a);
}

}  // namespace shardkit::python
