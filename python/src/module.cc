// shardkit._core: the compiled core of the shardkit Python package.
#include <nanobind/nanobind.h>

#include "python/src/bindings.h"

NB_MODULE(_core, m) {
  m.doc() = "The compiled core of shardkit; use the shardkit package.";
  shardkit::python::init_arguments(m);
  shardkit::python::init_shard_plan(m);
  shardkit::python::init_mixture(m);
  shardkit::python::init_packing(m);
  shardkit::python::init_eval_plan(m);
  shardkit::python::init_loader(m);
  shardkit::python::init_train(m);
  shardkit::python::init_layout(m);
  shardkit::python::init_multimodal(m);
  shardkit::python::init_image(m);
}
