// Bindings of the argument rules (bindings.h) for the package's Python
// classes, so that their arguments are checked as the bindings' own are:
// TypeError naming the parameter and the value for a wrong type (a float is
// never truncated), ValueError for an integer outside 64 bits.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <string>

#include "python/src/bindings.h"

namespace shardkit::python {

using namespace nb::literals;

void init_arguments(nb::module_& m) {
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
