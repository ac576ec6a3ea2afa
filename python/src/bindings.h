// One init function per core area; module.cc calls them in order.
#ifndef SHARDKIT_PYTHON_BINDINGS_H_
#define SHARDKIT_PYTHON_BINDINGS_H_

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <vector>

namespace shardkit::python {

namespace nb = nanobind;

template <typename T>
using NumpyArray = nb::ndarray<nb::numpy, T, nb::ndim<1>>;

// A fresh 1-D numpy array of n elements whose buffer C++ fills in place; the
// array owns the memory (no copy on the way to Python).
template <typename T>
NumpyArray<T> NewArray(std::size_t n, T** data) {
  T* buffer = new T[n > 0 ? n : 1];
  nb::capsule owner(buffer, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  *data = buffer;
  return NumpyArray<T>(buffer, {n}, owner);
}

// Any 1-D array-like of numbers as float64 (numpy.asarray), copied into a
// vector the core owns.
std::vector<double> ToDoubles(nb::handle values, const char* name);

void init_shard_plan(nb::module_& m);
void init_packing(nb::module_& m);
void init_eval_plan(nb::module_& m);
void init_loader(nb::module_& m);
void init_layout(nb::module_& m);

}  // namespace shardkit::python

#endif  // SHARDKIT_PYTHON_BINDINGS_H_
