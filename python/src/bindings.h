// The conversion header of shardkit._core: every conversion between Python
// objects and the core's vocabulary (Index, intervals, vectors, numpy arrays)
// lives here, once; the binding files (one per core area) only register.
//
// Conventions:
// - Results that own memory reach Python as numpy arrays without a copy:
//   NewArray / NewNd hand C++ a buffer the array owns; ViewOf gives a
//   read-only view of a vector owned by a bound object.
// - Arguments that Python passes in many shapes (a tuple, a list, a numpy
//   shape, any array-like of numbers) are taken as nb::typed<nb::handle, Tag>
//   and converted by the functions below, so that bad input is a ValueError
//   naming the argument (not nanobind's TypeError) while the generated stub
//   still says what is expected (the Tag's stub name).
// - An index outside its domain is an IndexError naming the index and the
//   domain (CheckedIndex).
#ifndef SHARDKIT_PYTHON_BINDINGS_H_
#define SHARDKIT_PYTHON_BINDINGS_H_

#include <cxxabi.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "shardkit/base/errors.h"
#include "shardkit/base/index.h"
#include "shardkit/eval/eval_plan.h"
#include "shardkit/loader/loader.h"
#include "shardkit/loader/multimodal_plan.h"
#include "shardkit/loader/train_plan.h"
#include "shardkit/sharding/mixture.h"
#include "shardkit/sharding/shard_plan.h"

namespace shardkit::python {

namespace nb = nanobind;

// ---- releasing the GIL ------------------------------------------------------
// Every blocking call releases the GIL through ReleaseGil, never
// nb::gil_scoped_release: a daemon thread that takes the GIL back while the
// interpreter exits is ended by CPython with pthread_exit, whose forced
// unwinding through gil_scoped_release's noexcept destructor (or a catch (...))
// aborts the process ("terminate called without an active exception"; a
// daemon thread looping over a TokenLoader at exit, 1 of 16 runs on Python
// 3.12). Such a thread parks instead, outside the GIL, until the process is gone.

inline bool InterpreterFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

[[noreturn]] inline void Park() {
  for (;;) ::pause();
}

// Takes the GIL back after a blocking call, or parks (see above).
inline void RestoreThreadOrPark(PyThreadState* saved) {
  if (InterpreterFinalizing()) Park();
  try {
    PyEval_RestoreThread(saved);
  } catch (abi::__forced_unwind&) {
    Park();  // never leaves the handler, so the unwind never completes
  }
}

class ReleaseGil {
 public:
  ReleaseGil() : saved_(PyEval_SaveThread()) {}
  ~ReleaseGil() { RestoreThreadOrPark(saved_); }
  ReleaseGil(const ReleaseGil&) = delete;
  ReleaseGil& operator=(const ReleaseGil&) = delete;

 private:
  PyThreadState* saved_;
};

// ---- stub names of arguments converted here ---------------------------------

struct IntSequenceTag {};     // collections.abc.Sequence[int]: a tuple, list or shape
struct FloatArrayTag {};      // numpy.typing.ArrayLike: any 1-D array-like of numbers
struct IntArrayTag {};        // numpy.typing.ArrayLike: any 1-D array-like of integers
struct AxesTag {};            // {name: size} or (name, size) pairs
struct SpecLikeTag {};        // a shardkit or JAX PartitionSpec, or its entries
struct SpecEntryTag {};       // one PartitionSpec entry
struct DevicesIndicesTag {};  // {device: tuple of slices}
struct IntTag {};             // int: converted by ToIndex / ToUint64 (messages name the value)
struct OptionalIntTag {};     // int | None
struct StrTag {};             // str: converted by ToStr
struct BoolTag {};            // bool: converted by ToBool
struct StrMappingTag {};      // {str: str}: converted by ToStrMapping
struct StateDictTag {};       // a state dict (state_dict()), checked where it is read
struct ScheduleTag {};        // (position, weights) pairs or None
struct ArrayListTag {};       // one array-like per source, or None
struct BoolsTag {};           // one bool, or one per source
struct SamplePairTag {};      // (sources, items): two int64 numpy arrays
struct OutPairTag {};         // (sources, items) to fill in place, or None

using IntSequence = nb::typed<nb::handle, IntSequenceTag>;
using Int = nb::typed<nb::handle, IntTag>;
using OptionalInt = nb::typed<nb::handle, OptionalIntTag>;
using Str = nb::typed<nb::handle, StrTag>;
using Bool = nb::typed<nb::handle, BoolTag>;
using StrMapping = nb::typed<nb::handle, StrMappingTag>;
using StateDictArg = nb::typed<nb::handle, StateDictTag>;
using FloatArray = nb::typed<nb::handle, FloatArrayTag>;
using IntArray = nb::typed<nb::handle, IntArrayTag>;

}  // namespace shardkit::python

namespace nanobind::detail {
#define SHARDKIT_STUB_NAME(Tag, text)              \
  template <>                                      \
  struct type_caster<shardkit::python::Tag> {      \
    static constexpr auto Name = const_name(text); \
  }
SHARDKIT_STUB_NAME(IntSequenceTag, "collections.abc.Sequence[int]");
SHARDKIT_STUB_NAME(FloatArrayTag, "numpy.typing.ArrayLike");
SHARDKIT_STUB_NAME(IntArrayTag, "numpy.typing.ArrayLike");
SHARDKIT_STUB_NAME(AxesTag,
                   "collections.abc.Mapping[str, int] | "
                   "collections.abc.Iterable[tuple[str, int]]");
SHARDKIT_STUB_NAME(SpecLikeTag,
                   "PartitionSpec | collections.abc.Iterable[str | tuple[str, ...] | None]");
SHARDKIT_STUB_NAME(SpecEntryTag, "str | tuple[str, ...] | None");
SHARDKIT_STUB_NAME(DevicesIndicesTag, "dict[int, tuple[slice, ...]]");
SHARDKIT_STUB_NAME(IntTag, "int");
SHARDKIT_STUB_NAME(OptionalIntTag, "int | None");
SHARDKIT_STUB_NAME(StrTag, "str");
SHARDKIT_STUB_NAME(BoolTag, "bool");
SHARDKIT_STUB_NAME(StrMappingTag, "collections.abc.Mapping[str, str]");
SHARDKIT_STUB_NAME(StateDictTag, "dict[str, typing.Any]");
SHARDKIT_STUB_NAME(ScheduleTag,
                   "collections.abc.Sequence[tuple[int, numpy.typing.ArrayLike]] | None");
SHARDKIT_STUB_NAME(ArrayListTag, "collections.abc.Sequence[numpy.typing.ArrayLike] | None");
SHARDKIT_STUB_NAME(BoolsTag, "bool | collections.abc.Sequence[bool]");
SHARDKIT_STUB_NAME(SamplePairTag,
                   "tuple[numpy.typing.NDArray[numpy.int64], numpy.typing.NDArray[numpy.int64]]");
SHARDKIT_STUB_NAME(OutPairTag,
                   "tuple[numpy.typing.NDArray[numpy.int64], numpy.typing.NDArray[numpy.int64]] | "
                   "None");
#undef SHARDKIT_STUB_NAME
}  // namespace nanobind::detail

namespace shardkit::python {

// ---- numpy results ------------------------------------------------------------

template <typename T>
using NumpyArray = nb::ndarray<nb::numpy, T, nb::ndim<1>>;

// A read-only 1-D int64 numpy view of memory owned by a bound object.
using Int64View = nb::ndarray<nb::numpy, const std::int64_t, nb::ndim<1>>;

// A fresh 1-D numpy array of n elements whose buffer C++ fills in place; the
// array owns the memory (no copy on the way to Python).
template <typename T>
NumpyArray<T> NewArray(std::size_t n, T** data) {
  T* buffer = new T[n > 0 ? n : 1];
  nb::capsule owner(buffer, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  *data = buffer;
  return NumpyArray<T>(buffer, {n}, owner);
}

// NewArray for an output whose length the caller chose through `param`: an
// array that cannot be allocated (Mixture.numpy(2**31) of an endless mixture
// asked for 2^62 samples) is a ValueError naming `param` and the size, not
// "MemoryError: std::bad_array_new_length".
template <typename T>
NumpyArray<T> NewArrayFor(const char* param, std::size_t n, T** data) {
  try {
    return NewArray<T>(n, data);
  } catch (const std::bad_alloc&) {
    throw std::invalid_argument(std::string(param) + ": an array of " + std::to_string(n) +
                                " elements of " + std::to_string(sizeof(T)) +
                                " bytes cannot be allocated; ask for a smaller range");
  }
}

// The same for any shape (an element count that overflows is refused like
// an allocation that fails).
template <typename T>
nb::ndarray<nb::numpy, T> NewNd(std::initializer_list<std::size_t> shape, T** data) {
  std::size_t n = 1;
  for (std::size_t s : shape) {
    if (__builtin_mul_overflow(n, s, &n)) throw std::bad_array_new_length();
  }
  T* buffer = new T[n > 0 ? n : 1];
  nb::capsule owner(buffer, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  *data = buffer;
  return nb::ndarray<nb::numpy, T>(buffer, shape.size(), shape.begin(), owner);
}

// The (sources, items) int64 arrays of n samples of a mixture, filled by
// fill(sources, items) with the GIL released; `param` names the argument
// that set n, as in NewArrayFor.
template <typename Fill>
std::pair<NumpyArray<std::int64_t>, NumpyArray<std::int64_t>> SampleArrays(const char* param,
                                                                           std::size_t n,
                                                                           Fill&& fill) {
  std::int64_t *sources = nullptr, *items = nullptr;
  auto a = NewArrayFor<std::int64_t>(param, n, &sources);
  auto b = NewArrayFor<std::int64_t>(param, n, &items);
  {
    ReleaseGil release;
    fill(sources, items);
  }
  return {a, b};
}

// A copy of `values` as a fresh numpy array.
template <typename T>
NumpyArray<T> ToArray(std::span<const T> values) {
  T* data;
  auto array = NewArray<T>(values.size(), &data);
  std::copy(values.begin(), values.end(), data);
  return array;
}

// A read-only numpy view of a vector owned by the Python object `owner` (the
// bound object holding the vector stays alive while the view does).
inline Int64View ViewOf(const std::vector<Index>& v, nb::handle owner) {
  static_assert(sizeof(Index) == sizeof(std::int64_t));
  return Int64View(reinterpret_cast<const std::int64_t*>(v.data()), {v.size()}, owner);
}

// The getter of a bound class's std::vector<Index> member as ViewOf's view
// of it: .def_prop_ro("offsets", &MemberView<&Packing::offsets>).
template <typename Pointer>
struct MemberOwner;
template <typename Class, typename Field>
struct MemberOwner<Field Class::*> {
  using type = Class;
};
template <auto Member>
Int64View MemberView(nb::handle self) {
  using Class = typename MemberOwner<decltype(Member)>::type;
  return ViewOf(nb::cast<const Class&>(self).*Member, self);
}

// A tuple of ints.
inline nb::typed<nb::tuple, Index, nb::ellipsis> ToTuple(std::span<const Index> values) {
  nb::list out;
  for (Index v : values) out.append(v);
  return nb::borrow<nb::typed<nb::tuple, Index, nb::ellipsis>>(nb::tuple(out));
}

// A float for a __repr__: six significant digits, as Python would print them.
inline std::string ReprFloat(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  std::string out = text;
  if (out.find_first_of(".eni") == std::string::npos) out += ".0";
  return out;
}

// ---- arguments ----------------------------------------------------------------

// A contiguous int64 array passed by the Python package (no copy).
using I64In = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

inline std::span<const Index> Span(const I64In& a) {
  return {reinterpret_cast<const Index*>(a.data()), a.shape(0)};
}

// operator.index(value) as a new reference: TypeError naming `name`, the
// value's type and the value for anything without __index__.
inline PyObject* NumberIndex(nb::handle value, const char* name) {
  PyObject* number = PyNumber_Index(value.ptr());
  if (!number) {
    PyErr_Clear();
    throw nb::type_error((std::string(name) + ": expected an integer, got " +
                          nb::cast<std::string>(nb::str(value.type().attr("__name__"))) + " " +
                          nb::cast<std::string>(nb::repr(value)))
                             .c_str());
  }
  return number;
}

// A Python integer (int, numpy integer, anything with __index__) as an
// Index: TypeError naming `name` and the value for anything else (a float
// such as 1.9 is never truncated), ValueError naming them when it does not
// fit in a signed 64-bit integer (instead of nanobind's signature dump).
inline Index ToIndex(nb::handle value, const char* name) {
  PyObject* number = NumberIndex(value, name);
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(number, &overflow);
  const std::string text = nb::cast<std::string>(nb::repr(nb::handle(number)));
  Py_DECREF(number);
  if (overflow) {
    throw std::invalid_argument(std::string(name) + ": " + text +
                                " does not fit in a signed 64-bit integer");
  }
  return static_cast<Index>(v);
}

inline std::optional<Index> ToOptionalIndex(nb::handle value, const char* name) {
  if (value.is_none()) return std::nullopt;
  return ToIndex(value, name);
}

// As ToIndex, for unsigned 64-bit values (seeds, epochs): ValueError naming
// `name` for a negative value or one >= 2^64.
inline std::uint64_t ToUint64(nb::handle value, const char* name) {
  PyObject* number = NumberIndex(value, name);
  const unsigned long long v = PyLong_AsUnsignedLongLong(number);
  const bool bad = v == static_cast<unsigned long long>(-1) && PyErr_Occurred();
  const std::string text = nb::cast<std::string>(nb::repr(nb::handle(number)));
  Py_DECREF(number);
  if (bad) {
    PyErr_Clear();
    throw std::invalid_argument(std::string(name) + ": " + text + " is outside [0, 2^64)");
  }
  return static_cast<std::uint64_t>(v);
}

// What a wrong-typed argument is, for messages: "float 1.9".
inline std::string TypeAndRepr(nb::handle value) {
  return nb::cast<std::string>(nb::str(value.type().attr("__name__"))) + " " +
         nb::cast<std::string>(nb::repr(value));
}

// A state given back as a dict (or any JSON value) as the JSON text the core's
// codecs read: json.dumps of it; a ValueError naming `state` when it cannot
// be written as JSON. States never have a format of their own in the bindings.
inline std::string StateText(nb::handle state) {
  try {
    return nb::cast<std::string>(nb::module_::import_("json").attr("dumps")(state));
  } catch (const nb::python_error& e) {
    // The exception's own one-line text, not e.what() (which holds a traceback).
    ThrowInvalid("state",
                 "is not JSON-serialisable (" + nb::cast<std::string>(nb::str(e.value())) + ")");
  }
}

// The core's JSON text of a state as a Python object (json.loads).
inline nb::object JsonToPython(const std::string& text) {
  return nb::module_::import_("json").attr("loads")(text);
}

// A str argument; TypeError naming `name` and the value otherwise (instead of
// nanobind's signature dump).
inline std::string ToStr(nb::handle value, const char* name) {
  if (!nb::isinstance<nb::str>(value)) {
    throw nb::type_error(
        (std::string(name) + ": expected a str, got " + TypeAndRepr(value)).c_str());
  }
  return nb::cast<std::string>(value);
}

// A bool argument (True/False or a numpy bool); TypeError naming `name` and
// the value for anything else: 1, "yes" or None are not silently truthy.
inline bool ToBool(nb::handle value, const char* name) {
  if (nb::isinstance<nb::bool_>(value)) return nb::cast<bool>(value);
  const std::string type = nb::cast<std::string>(nb::str(value.type().attr("__name__")));
  if (type == "bool_") return PyObject_IsTrue(value.ptr()) == 1;
  throw nb::type_error(
      (std::string(name) + ": expected a bool, got " + TypeAndRepr(value)).c_str());
}

// The items of any iterable but a str or bytes, as a list; TypeError naming
// `name` and the value otherwise ("schedule: expected a sequence of (position,
// weights) pairs, got float 1.5", not "'float' object is not iterable").
inline nb::list ToList(nb::handle values, const char* name, const char* expected) {
  if (nb::isinstance<nb::str>(values) || nb::isinstance<nb::bytes>(values) ||
      !nb::hasattr(values, "__iter__")) {
    throw nb::type_error(
        (std::string(name) + ": expected " + expected + ", got " + TypeAndRepr(values)).c_str());
  }
  PyObject* list = PySequence_List(values.ptr());
  if (list == nullptr) {
    PyErr_Clear();
    throw nb::type_error(
        (std::string(name) + ": expected " + expected + ", got " + TypeAndRepr(values)).c_str());
  }
  return nb::steal<nb::list>(list);
}

// A mapping of str to str (an environment: os.environ or a dict); TypeError
// naming `name` and the offending key or value otherwise.
inline std::vector<std::pair<std::string, std::string>> ToStrMapping(nb::handle value,
                                                                     const char* name) {
  if (!nb::hasattr(value, "items")) {
    throw nb::type_error(
        (std::string(name) + ": expected a mapping of str to str, got " + TypeAndRepr(value))
            .c_str());
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (nb::handle item : ToList(value.attr("items")(), name, "a mapping of str to str")) {
    nb::handle key = item[0], v = item[1];
    if (!nb::isinstance<nb::str>(key) || !nb::isinstance<nb::str>(v)) {
      throw nb::type_error((std::string(name) + ": expected a mapping of str to str, got " +
                            TypeAndRepr(key) + ": " + TypeAndRepr(v))
                               .c_str());
    }
    out.emplace_back(nb::cast<std::string>(key), nb::cast<std::string>(v));
  }
  return out;
}

// A state given back as a dict (what state_dict() returned); TypeError naming
// `name` for anything else.
inline nb::dict ToStateDict(nb::handle value, const char* name) {
  if (!nb::isinstance<nb::dict>(value)) {
    throw nb::type_error(
        (std::string(name) + ": expected a dict from state_dict(), got " + TypeAndRepr(value))
            .c_str());
  }
  return nb::borrow<nb::dict>(value);
}

// An instance of the bound class T; TypeError naming `name`, the class and the
// value otherwise (instead of nanobind's signature dump).
template <typename T>
const T& ToInstance(nb::handle value, const char* name, const char* type_name) {
  if (!nb::isinstance<T>(value)) {
    throw nb::type_error(
        (std::string(name) + ": expected a " + type_name + ", got " + TypeAndRepr(value)).c_str());
  }
  return nb::cast<const T&>(value);
}

// A Python int sequence (tuple, list, numpy shape) as Index values; a
// ValueError naming `name` otherwise.
inline std::vector<Index> ToIndices(nb::handle values, const char* name) {
  std::vector<Index> out;
  try {
    for (nb::handle v : values) out.push_back(ToIndex(v, name));
  } catch (const std::exception&) {
    throw std::invalid_argument(std::string(name) + ": expected a sequence of ints, got " +
                                nb::cast<std::string>(nb::repr(values)));
  }
  return out;
}

// Any 1-D array-like of integers (a list, a numpy integer array) as a
// contiguous int64 array, viewed without a copy when it already is one; held
// alive by *keep. Anything else (floats: 1.5 was read as position 1; strings;
// 2-D) is a ValueError naming `name`, not nanobind's multi-line signature dump.
inline nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig> ToInt64Array(nb::handle values,
                                                                               const char* name,
                                                                               nb::object* keep) {
  nb::module_ np = nb::module_::import_("numpy");
  nb::object array;
  try {
    array = np.attr("asarray")(values);
  } catch (const nb::python_error&) {
    throw std::invalid_argument(std::string(name) + ": expected integers, got " +
                                TypeAndRepr(values));
  }
  if (nb::cast<int>(array.attr("ndim")) != 1) {
    throw std::invalid_argument(std::string(name) + ": expected a 1-D array of integers, got " +
                                TypeAndRepr(values));
  }
  const Index size = nb::cast<Index>(array.attr("size"));
  const std::string kind = nb::cast<std::string>(array.attr("dtype").attr("kind"));
  if (size > 0 && kind != "i" && kind != "u") {
    throw std::invalid_argument(std::string(name) + ": expected integers, got dtype " +
                                nb::cast<std::string>(array.attr("dtype").attr("name")));
  }
  if (kind == "u" && size > 0 &&
      nb::cast<std::uint64_t>(nb::int_(array.attr("max")())) >
          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    throw std::invalid_argument(std::string(name) + ": a value does not fit in int64");
  }
  *keep = np.attr("ascontiguousarray")(array, nb::arg("dtype") = np.attr("int64"));
  return nb::cast<nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig>>(*keep);
}

// Any 1-D array-like of numbers as float64 (numpy.asarray), copied into a
// vector the core owns; a ValueError naming `name` for another shape.
inline std::vector<double> ToDoubles(nb::handle values, const char* name) {
  nb::module_ np = nb::module_::import_("numpy");
  nb::object array;
  try {
    array = np.attr("ascontiguousarray")(values, nb::arg("dtype") = np.attr("float64"));
  } catch (const nb::python_error& e) {
    // numpy's "could not convert string to float: 'abc'", named.
    std::string text = nb::cast<std::string>(nb::repr(values));
    if (text.size() > 80) text = text.substr(0, 77) + "...";
    throw std::invalid_argument(std::string(name) + ": expected numbers, got " + text);
  }
  if (nb::cast<int>(array.attr("ndim")) != 1) {
    std::string shape;
    for (nb::handle extent : array.attr("shape")) {
      shape += (shape.empty() ? "" : ", ") + std::to_string(nb::cast<Index>(extent));
    }
    throw std::invalid_argument(std::string(name) + ": expected a 1-D array, got shape (" + shape +
                                ")");
  }
  auto view = nb::cast<nb::ndarray<const double, nb::ndim<1>, nb::c_contig>>(array);
  return std::vector<double>(view.data(), view.data() + view.shape(0));
}

// k, or k + size for a negative k (Python's convention); otherwise an
// IndexError in the library's wording, "<what>: k is outside [0, size)".
inline Index CheckedIndex(Index k, Index size, const char* what) {
  const Index original = k;
  if (k < 0) k += size;
  if (k < 0 || k >= size) {
    throw nb::index_error((std::string(what) + ": " + std::to_string(original) +
                           " is outside [0, " + std::to_string(size) + ")")
                              .c_str());
  }
  return k;
}

// ---- option structs <-> keyword arguments ------------------------------------
// One table per option struct (arguments.cc), read in both directions: every
// field by its core name (the one rename: TrainOptions::cp's size, strategy
// and granularity are cp_size, cp_strategy, cp_granularity), converted by
// the rules above (ToIndex, ToUint64, ToBool, ToStr and the core's enum
// parser; None for an unset optional). A LoaderOptions reads the
// TrainOptions table, then the PaddingOptions one, then its own fields; a
// CollateOptions seq_len, then its PaddingOptions. Reading refuses a name
// that is no field ("<name>: not an option of <what>"); a Whale switch given
// as None follows Whale's environment variables (WhalePolicyFromEnvironment).
void ReadOptions(nb::handle kwargs, TrainOptions* options, const char* what = "TrainPlan");
void ReadOptions(nb::handle kwargs, LoaderOptions* options, const char* what = "TokenLoader");
void ReadOptions(nb::handle kwargs, MultimodalOptions* options,
                 const char* what = "MultimodalPlan");
void ReadOptions(nb::handle kwargs, CollateOptions* options, const char* what);
// ShardPlan's and EvalPlan's keyword options by their tables (ShardOptions'
// weights: an array of numbers, or None for none).
void ReadOptions(nb::handle kwargs, ShardOptions* options, const char* what = "ShardPlan");
void ReadOptions(nb::handle kwargs, EvalOptions* options, const char* what = "EvalPlan");
[[nodiscard]] nb::dict WriteOptions(const LoaderOptions& options);
// The keyword parameters of an options struct as a signature spells them
// ("split: str = 'round_robin', ..."), in the table's order with the core's
// defaults: the bindings that take the struct's fields as **options build
// their nb::sig with it, so the stub and help() show every option.
[[nodiscard]] std::string OptionParameters(const ShardOptions& defaults);
[[nodiscard]] std::string OptionParameters(const EvalOptions& defaults);

// ---- one init function per core area; module.cc calls them in order ----------

void init_arguments(nb::module_& m);
void init_shard_plan(nb::module_& m);
void init_mixture(nb::module_& m);
void init_packing(nb::module_& m);
void init_eval_plan(nb::module_& m);
void init_loader(nb::module_& m);
void init_train(nb::module_& m);
void init_layout(nb::module_& m);
void init_multimodal(nb::module_& m);
void init_image(nb::module_& m);

// Mixture arguments (mixture.cc), shared with the mixture loader (loader.cc):
// a schedule of (position, weights) pairs (None: none) and the repeat flags
// (one bool, or one per source of `k`); errors name `schedule` / `repeat`.
std::vector<SchedulePoint> ToScheduleList(nb::handle schedule);
std::vector<bool> ToRepeat(nb::handle repeat, Index k);
// The order options a Mixture and a mixture loader share, each converted as
// above (by, block, schedule, interpolation, schedule_unit, repeat over `k`
// sources); seed and tokens are the caller's.
MixtureOptions ToMixtureOptions(nb::handle by, nb::handle block, nb::handle schedule,
                                nb::handle interpolation, nb::handle schedule_unit,
                                nb::handle repeat, Index k);

}  // namespace shardkit::python

#endif  // SHARDKIT_PYTHON_BINDINGS_H_
