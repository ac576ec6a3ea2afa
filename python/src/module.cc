// shardkit._core: the compiled core of the shardkit Python package.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "python/src/bindings.h"

NB_MODULE(_core, m) {
  m.doc() = "The compiled core of shardkit; use the shardkit package.";
  // The bindings' argument rules (bindings.h) for the package's Python
  // classes, so that their arguments are checked as the bindings' own are:
  // TypeError naming the parameter and the value for a wrong type (a float is
  // never truncated), ValueError for an integer outside 64 bits.
  using namespace nanobind::literals;
  namespace py = shardkit::python;
  m.def(
      "_index",
      [](nanobind::handle v, const std::string& name) { return py::ToIndex(v, name.c_str()); },
      nanobind::sig("def _index(value: typing.Any, name: str) -> int"), "value"_a.none(), "name"_a);
  m.def(
      "_optional_index",
      [](nanobind::handle v, const std::string& name) {
        return py::ToOptionalIndex(v, name.c_str());
      },
      nanobind::sig("def _optional_index(value: typing.Any, name: str) -> int | None"),
      "value"_a.none(), "name"_a);
  m.def(
      "_uint64",
      [](nanobind::handle v, const std::string& name) { return py::ToUint64(v, name.c_str()); },
      nanobind::sig("def _uint64(value: typing.Any, name: str) -> int"), "value"_a.none(),
      "name"_a);
  m.def(
      "_str",
      [](nanobind::handle v, const std::string& name) { return py::ToStr(v, name.c_str()); },
      nanobind::sig("def _str(value: typing.Any, name: str) -> str"), "value"_a.none(), "name"_a);
  m.def(
      "_bool",
      [](nanobind::handle v, const std::string& name) { return py::ToBool(v, name.c_str()); },
      nanobind::sig("def _bool(value: typing.Any, name: str) -> bool"), "value"_a.none(), "name"_a);
  m.def(
      "_str_mapping",
      [](nanobind::handle v, const std::string& name) {
        nanobind::dict out;
        for (const auto& [key, value] : py::ToStrMapping(v, name.c_str())) {
          out[nanobind::str(key.c_str())] = nanobind::str(value.c_str());
        }
        return out;
      },
      nanobind::sig("def _str_mapping(value: typing.Any, name: str) -> dict[str, str]"),
      "value"_a.none(), "name"_a);
  shardkit::python::init_shard_plan(m);
  shardkit::python::init_mixture(m);
  shardkit::python::init_packing(m);
  shardkit::python::init_eval_plan(m);
  shardkit::python::init_loader(m);
  shardkit::python::init_train(m);
  shardkit::python::init_layout(m);
  shardkit::python::init_multimodal(m);
}
