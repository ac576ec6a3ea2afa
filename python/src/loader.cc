// Bindings of TokenSource and TokenLoader (the Python class TokenLoader in
// shardkit/loader.py wraps these); states go through the core codec
// (shardkit/loader/loader_state.h).
#include "shardkit/loader/loader.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "python/src/bindings.h"
#include "shardkit/base/atomic_file.h"
#include "shardkit/loader/loader_state.h"
#include "shardkit/loader/mixture_loader.h"
#include "shardkit/loader/source_formats.h"
#include "shardkit/loader/token_source.h"
#include "shardkit/loader/token_writer.h"

namespace shardkit::python {

using namespace nb::literals;

namespace {

// A source plus the Python objects (numpy arrays) whose memory it views.
struct PySource {
  std::shared_ptr<const TokenSource> source;
  nb::object keep_tokens, keep_offsets;
};

// ---- state <-> dict through the core codec ---------------------------------
// state_dict() is json.loads of the core's JSON text, and a dict given back
// is json.dumps'd and read by the core: the binding holds no format of its own.

nb::object StateToDict(const LoaderState& s) { return JsonToPython(LoaderStateToJson(s)); }

LoaderState DictToState(nb::handle h) {
  const std::string text = StateText(h);
  ReleaseGil release;
  return LoaderStateFromJson(text);
}

// ---- batches -> numpy without copies --------------------------------------

template <typename T>
nb::object View(const std::shared_ptr<const Batch>& batch, const std::vector<T>& values,
                std::size_t rows, std::size_t cols) {
  auto* keep = new std::shared_ptr<const Batch>(batch);
  nb::capsule owner(keep,
                    [](void* p) noexcept { delete static_cast<std::shared_ptr<const Batch>*>(p); });
  T* data = const_cast<T*>(values.data());
  if (cols == 0) {
    std::size_t shape[1] = {values.size()};
    return nb::cast(nb::ndarray<nb::numpy, T>(data, 1, shape, owner));
  }
  std::size_t shape[2] = {rows, cols};
  return nb::cast(nb::ndarray<nb::numpy, T>(data, 2, shape, owner));
}

nb::dict BatchToDict(const std::shared_ptr<const Batch>& b) {
  const auto rows = static_cast<std::size_t>(b->batch_size);
  const auto cols = static_cast<std::size_t>(b->seq_len);
  nb::dict d;
  d["input_ids"] = View(b, b->input_ids, rows, cols);
  d["labels"] = View(b, b->labels, rows, cols);
  d["position_ids"] = View(b, b->position_ids, rows, cols);
  d["document_ids"] = View(b, b->document_ids, rows, cols);
  d["cu_seqlens"] = View(b, b->cu_seqlens, 0, 0);
  d["documents"] = View(b, b->documents, 0, 0);
  d["starts"] = View(b, b->starts, 0, 0);
  d["lengths"] = View(b, b->lengths, 0, 0);
  d["rows"] = View(b, b->rows, 0, 0);
  d["max_seqlen"] = b->max_seqlen;
  d["row_tokens"] = View(b, b->row_tokens, 0, 0);
  d["step"] = b->step;
  if (!b->cp_index.empty()) {
    d["cp_index"] = View(b, b->cp_index, rows, cols);
    d["cu_seqlens_padded"] = View(b, b->cu_seqlens_padded, 0, 0);
  }
  if (!b->block_mask.empty()) {
    auto* keep = new std::shared_ptr<const Batch>(b);
    nb::capsule owner(
        keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<const Batch>*>(p); });
    std::size_t shape[3] = {rows, cols, cols};
    d["block_mask"] = nb::cast(nb::ndarray<nb::numpy, std::uint8_t>(
        const_cast<std::uint8_t*>(b->block_mask.data()), 3, shape, owner));
  }
  return d;
}

// A vector as a numpy array that owns it (no copy).
template <typename T>
nb::ndarray<nb::numpy, T> VectorToArray(std::vector<T> values) {
  auto* keep = new std::vector<T>(std::move(values));
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  std::size_t shape[1] = {keep->size()};
  return nb::ndarray<nb::numpy, T>(keep->data(), 1, shape, owner);
}

// What a core loader reads each epoch: one source (a mixture's epochs are the
// core MixtureLoader's, _MixtureLoader below).
TokenLoader::EpochSource EpochSourceOf(nb::handle source) {
  std::shared_ptr<const TokenSource> one = nb::cast<const PySource&>(source).source;
  return [one](std::uint64_t) { return one; };
}

TokenDType DTypeOf(nb::handle array) {
  const std::string name = nb::cast<std::string>(array.attr("dtype").attr("name"));
  const std::string order = nb::cast<std::string>(array.attr("dtype").attr("byteorder"));
  if (order == ">") {
    const std::string str = nb::cast<std::string>(array.attr("dtype").attr("str"));
    ThrowInvalid("tokens", "big-endian dtype " + str +
                               " is not supported (tokens are read in place); convert with "
                               "tokens.astype('" +
                               "<" + str.substr(1) + "')");
  }
  if (name == "uint16") return TokenDType::kUint16;
  if (name == "int32") return TokenDType::kInt32;
  if (name == "uint32") return TokenDType::kUint32;
  ThrowInvalid("tokens", "dtype " + name + " is not a token type (uint16, int32, uint32)");
}

// Arrays the caller made C-contiguous and 1-D: the source views them (read-only
// arrays, np.load(mmap_mode="r"), are the normal way to pass tokens) and keeps
// them alive.
PySource FromArrays(nb::object tokens, nb::object offsets) {
  const TokenDType type = DTypeOf(tokens);
  auto t = nb::cast<nb::ndarray<nb::ro, nb::ndim<1>, nb::c_contig, nb::device::cpu>>(tokens);
  auto o = nb::cast<nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig>>(offsets);
  PySource s;
  {
    ReleaseGil release;
    s.source = TokenSource::FromMemory(t.data(), type, static_cast<Index>(t.shape(0)), o.data(),
                                       static_cast<Index>(o.shape(0)));
  }
  s.keep_tokens = tokens;
  s.keep_offsets = offsets;
  return s;
}

std::string Repr(nb::handle h) { return nb::cast<std::string>(nb::repr(h)); }

// TokenLoader's tokens / offsets as a source: two paths (not a directory), or
// a token array (any integer type whose values fit int32; the token types are
// viewed in place) and integer offsets.
PySource SourceOf(nb::handle tokens, nb::handle offsets, const std::string& token_dtype) {
  nb::module_ os = nb::module_::import_("os");
  auto is_path = [&](nb::handle h) {
    return nb::isinstance<nb::str>(h) || nb::isinstance(h, os.attr("PathLike"));
  };
  if (is_path(tokens)) {
    nb::object path = os.attr("fspath")(tokens);
    if (nb::cast<bool>(os.attr("path").attr("isdir")(path))) {
      ThrowInvalid("offsets", "must be None when tokens is a directory (" + Repr(path) + ")");
    }
    if (!is_path(offsets)) ThrowInvalid("offsets", "must be a path when tokens is a path");
    SourceOptions o{ParseTokenDType(token_dtype)};
    const std::string t = nb::cast<std::string>(path);
    const std::string f = nb::cast<std::string>(os.attr("fspath")(offsets));
    ReleaseGil release;
    return PySource{TokenSource::Open(t, f, o), {}, {}};
  }
  if (offsets.is_none()) ThrowInvalid("offsets", "required with a token array");
  nb::module_ np = nb::module_::import_("numpy");
  nb::object t = np.attr("asarray")(tokens);
  if (nb::cast<int>(t.attr("ndim")) != 1) {
    ThrowInvalid("tokens", "expected a 1-D array, got shape " + Repr(t.attr("shape")));
  }
  nb::object dtype = t.attr("dtype");
  const std::string name = nb::cast<std::string>(dtype.attr("name"));
  if (name != "uint16" && name != "int32" && name != "uint32") {
    const std::string kind = nb::cast<std::string>(nb::str(dtype.attr("kind")));
    const std::string str = nb::cast<std::string>(nb::str(dtype));
    if (kind != "i" && kind != "u")
      ThrowInvalid("tokens", "dtype " + str + " is not an integer type");
    if (nb::cast<Index>(t.attr("size")) > 0 &&
        (t.attr("min")() < nb::int_(0) ||
         t.attr("max")() > nb::int_(std::numeric_limits<std::int32_t>::max()))) {
      ThrowInvalid("tokens", str + " values outside int32 range");
    }
    t = t.attr("astype")(np.attr("int32"));
  }
  nb::object o = np.attr("asarray")(offsets);
  nb::object odtype = o.attr("dtype");
  const std::string okind = nb::cast<std::string>(nb::str(odtype.attr("kind")));
  if (nb::cast<int>(o.attr("ndim")) != 1 || (okind != "i" && okind != "u")) {
    ThrowInvalid("offsets", "expected a 1-D integer array, got " +
                                nb::cast<std::string>(nb::str(odtype)) + " of shape " +
                                Repr(o.attr("shape")));
  }
  return FromArrays(np.attr("ascontiguousarray")(t),
                    np.attr("ascontiguousarray")(o, "dtype"_a = np.attr("int64")));
}

// The members the two loader bindings share, each under the one name the
// Python TokenLoader forwards (its public name): passes, epochs and the
// equal-steps plan's figures. `loader_of(self)` is the TokenLoader that
// carries the plan (the current epoch's one for a MixtureLoader), kept alive
// while it is read.
template <typename C, typename LoaderOf>
void DefineLoaderMembers(nb::class_<C>& cls, LoaderOf loader_of) {
  auto plan_of = [](const TokenLoader& l) -> const TrainPlan& {
    if (!l.train_plan())
      ThrowInvalid("equal_steps", "this loader packs per rank; it has no global plan");
    return *l.train_plan();
  };
  // f(plan) of an equal-steps loader (without the GIL: the plan may plan the
  // epoch first), None for a loader packing per rank.
  auto plan_value = [loader_of](auto f) {
    using T = decltype(f(std::declval<const TrainPlan&>()));
    return [loader_of, f](const C& self) -> std::optional<T> {
      const auto l = loader_of(self);
      if (!l->train_plan()) return std::nullopt;
      ReleaseGil release;
      return f(*l->train_plan());
    };
  };
  cls.def("begin_pass", &C::BeginPass, "Starts a pass: its id for next(pass).")
      .def(
          "set_epoch",
          [](C& l, nb::handle epoch) {
            const std::uint64_t e = ToUint64(epoch, "epoch");
            ReleaseGil release;
            l.SetEpoch(e);
          },
          "epoch"_a)
      .def_prop_ro("num_steps", plan_value([](const TrainPlan& p) { return p.epoch_steps(); }),
                   "Equal steps: the steps of the whole epoch (TrainPlan::epoch_steps); None "
                   "per rank.")
      .def_prop_ro("first_step", plan_value([](const TrainPlan& p) { return p.first_step(); }),
                   "Equal steps: the step of the epoch this pass starts at "
                   "(TrainPlan::first_step); None per rank.")
      .def_prop_ro("plan_summary", plan_value([](const TrainPlan& p) { return p.summary(); }),
                   "Equal steps: the plan's TrainSummary; None for a loader packing per rank.")
      .def_prop_ro(
          "fingerprint",
          [loader_of, plan_of](const C& self) { return plan_of(*loader_of(self)).Fingerprint(); },
          "Equal steps: the plan's fingerprint (ValueError naming equal_steps per rank).")
      .def(
          "describe",
          [loader_of, plan_of](const C& self) { return plan_of(*loader_of(self)).Describe(); },
          "Equal steps: the plan's parameters in words (ValueError naming equal_steps per rank).")
      .def_prop_ro(
          "dropped", [loader_of](const C& self) { return loader_of(self)->dropped(); },
          "Documents dropped so far this epoch (oversize=\"drop\").")
      .def_prop_ro(
          "num_documents",
          [loader_of](const C& self) { return loader_of(self)->source().num_documents(); },
          "Documents of the source the current epoch reads (a mixture: its window).")
      .def_prop_ro(
          "file_policy", [loader_of](const C& self) { return loader_of(self)->file_policy(); },
          "With shard_files: the WhaleChoice applied to the files; None otherwise.");
}

}  // namespace

void init_loader(nb::module_& m) {
  nb::class_<PySource>(m, "_TokenSource",
                       "Tokenised documents, memory-mapped from files or viewed in arrays.")
      .def_static(
          "open",
          [](const std::string& tokens, const std::string& offsets,
             const std::string& token_dtype) {
            SourceOptions o{ParseTokenDType(token_dtype)};
            ReleaseGil release;
            return PySource{TokenSource::Open(tokens, offsets, o), {}, {}};
          },
          "tokens"_a, "offsets"_a, "token_dtype"_a = "int32")
      .def_static(
          "open_directory",
          [](const std::string& directory, const std::string& token_dtype) {
            SourceOptions o{ParseTokenDType(token_dtype)};
            ReleaseGil release;
            return PySource{TokenSource::OpenDirectory(directory, o), {}, {}};
          },
          "directory"_a, "token_dtype"_a = "int32")
      .def_static(
          "open_source",
          [](const std::vector<std::string>& paths, std::optional<std::string> format,
             std::optional<std::string> token_dtype, std::optional<Index> vocab_size,
             std::optional<std::int64_t> eos_token_id, std::optional<std::int64_t> bos_token_id,
             const std::string& column) {
            OpenSourceOptions o;
            o.column = column;
            if (format) o.format = ParseSourceFormat(*format);
            if (token_dtype) {
              o.npy.raw_token_dtype = ParseTokenDType(*token_dtype);
              o.olmo.token_dtype = o.npy.raw_token_dtype;
            }
            o.olmo.vocab_size = vocab_size;
            o.olmo.eos_token_id = eos_token_id;
            o.olmo.bos_token_id = bos_token_id;
            ReleaseGil release;
            return PySource{OpenSource(paths, o), {}, {}};
          },
          "paths"_a, "format"_a = nb::none(), "token_dtype"_a = nb::none(),
          "vocab_size"_a = nb::none(), "eos_token_id"_a = nb::none(), "bos_token_id"_a = nb::none(),
          "column"_a = "input_ids",
          "The paths as one source, each in `format` or the format detected from its files "
          "(shardkit/loader/source_formats.h).")
      .def_static("from_arrays", &FromArrays, "tokens"_a, "offsets"_a,
                  "C-contiguous 1-D token (uint16, int32, uint32) and int64 offset arrays, "
                  "viewed in place.")
      .def_static("of", &SourceOf, "tokens"_a.none(), "offsets"_a.none(), "token_dtype"_a = "int32",
                  "TokenLoader's tokens / offsets: two paths, or two arrays (any integer "
                  "tokens within int32, converted; any integer offsets).")
      .def_static(
          "concat",
          [](nb::list sources) {
            std::vector<std::shared_ptr<const TokenSource>> parts;
            for (nb::handle h : sources) parts.push_back(nb::cast<const PySource&>(h).source);
            PySource s;
            {
              ReleaseGil release;
              s.source = TokenSource::Concat(parts);
            }
            s.keep_tokens = sources;  // the sources, and the arrays they view
            return s;
          },
          "sources"_a, "The sources as one, in the order given (TokenSource::Concat).")
      .def_prop_ro("num_documents", [](const PySource& s) { return s.source->num_documents(); })
      .def_prop_ro("num_tokens", [](const PySource& s) { return s.source->num_tokens(); })
      .def_prop_ro("num_parts", [](const PySource& s) { return s.source->num_parts(); })
      .def_prop_ro(
          "fingerprint",
          [](const PySource& s) {
            ReleaseGil release;
            return FingerprintData(*s.source).hash;
          },
          "The data fingerprint loader states carry (shardkit/loader/loader_state.h).")
      .def(
          "lengths",
          [](const PySource& s) {
            const Index n = s.source->num_documents();
            std::vector<std::int64_t> values(static_cast<std::size_t>(n));
            {
              ReleaseGil release;
              s.source->CheckUnchanged();
              if (const std::int64_t* offsets = s.source->ContiguousOffsets()) {
                for (Index d = 0; d < n; ++d) values[d] = offsets[d + 1] - offsets[d];
              } else {
                for (Index d = 0; d < n; ++d) values[d] = s.source->DocumentLength(d);
              }
              s.source->CheckUnchanged();  // and after: token_source.h
            }
            return VectorToArray(std::move(values));
          },
          "Every document's length in tokens (int64), from the index alone.")
      .def(
          "document",
          [](const PySource& s, Index d) {
            CheckIndex("document", d, 0, s.source->num_documents());
            s.source->CheckUnchanged(d);
            const Index n = s.source->DocumentLength(d);
            std::vector<std::int32_t> values(static_cast<std::size_t>(n));
            s.source->Copy(d, 0, n, values.data());
            s.source->CheckUnchanged(d);  // and after: token_source.h
            return VectorToArray(std::move(values));
          },
          "document"_a, "The tokens of document `document` (int32, a copy).")
      .def(
          "document_length",
          [](const PySource& s, Index d) {
            CheckIndex("document", d, 0, s.source->num_documents());
            s.source->CheckUnchanged(d);
            return s.source->DocumentLength(d);
          },
          "document"_a);

  nb::class_<TokenWriter>(m, "_TokenWriter",
                          "The core's writer of Megatron / npy token files "
                          "(shardkit/loader/token_writer.h), behind shardkit.prepare.")
      .def(
          "__init__",
          [](TokenWriter* self, const std::string& output, const std::string& format,
             const std::string& token_dtype) {
            new (self) TokenWriter(output, ParseSourceFormat(format), ParseTokenDType(token_dtype));
          },
          "output"_a, "format"_a, "token_dtype"_a)
      .def_static(
          "dtype_for_vocabulary",
          [](Index vocab_size) {
            return std::string(TokenDTypeName(TokenWriter::DTypeForVocabulary(vocab_size)));
          },
          "vocab_size"_a)
      .def(
          "add",
          [](TokenWriter& w, nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig> tokens) {
            ReleaseGil release;
            w.Add(tokens.data(), static_cast<Index>(tokens.shape(0)));
          },
          "tokens"_a)
      .def("finish", [](TokenWriter& w) {
        TokenWriterResult r;
        {
          ReleaseGil release;
          r = w.Finish();
        }
        nb::dict d;
        d["documents"] = r.documents;
        d["tokens"] = r.tokens;
        d["files"] = r.files;
        return d;
      });

  auto token_loader =
      nb::class_<TokenLoader>(m, "_TokenLoader", "The C++ loader behind shardkit.TokenLoader.");
  token_loader
      .def(
          "__init__",
          [](TokenLoader* self, nb::handle source, nb::object state, nb::kwargs options) {
            LoaderOptions o;
            ReadOptions(options, &o);
            std::optional<LoaderState> resume;
            if (!state.is_none()) resume = DictToState(state);
            TokenLoader::EpochSource epochs = EpochSourceOf(source);
            // Planning an equal-steps epoch takes a while without the GIL: a
            // daemon thread still here at interpreter exit parks (see next()).
            ReleaseGil release;
            new (self) TokenLoader(std::move(epochs), std::move(o), std::move(resume));
          },
          "source"_a, "state"_a = nb::none(), "options"_a,
          "source: a _TokenSource, or (sources, order) for a mixture loader (each epoch reads "
          "its window); options: LoaderOptions' fields by name (bindings.h, ReadOptions).")
      .def_prop_ro(
          "options", [](const TokenLoader& l) { return WriteOptions(l.options()); },
          "The loader's options as a dict (the epoch: the one it stands in).")
      .def(
          "load_state_dict",
          [](TokenLoader& l, nb::handle state) {
            // One state (this consumer's own or a merged one), or a list
            // (TokenLoader::Restore: ResumeStateFor's choice).
            if (!nb::isinstance<nb::list>(state) && !nb::isinstance<nb::tuple>(state)) {
              LoaderState one = DictToState(state);
              ReleaseGil release;
              l.Restore(std::move(one));
              return;
            }
            std::vector<LoaderState> states;
            for (nb::handle h : state) states.push_back(DictToState(h));
            ReleaseGil release;
            l.Restore(states);
          },
          "state"_a)
      .def_prop_ro("epoch", &TokenLoader::epoch)
      .def_prop_ro("standing_epoch", &TokenLoader::standing_epoch)
      .def(
          "next",
          [](TokenLoader& loader, std::optional<Index> pass) -> nb::object {
            std::shared_ptr<const Batch> batch;
            {
              ReleaseGil release;
              batch = pass ? loader.Next(*pass) : loader.Next();
            }
            if (!batch) return nb::none();
            return BatchToDict(batch);
          },
          "pass"_a = nb::none(),
          "The next batch as a dict of numpy arrays (views of the batch's buffers), or None "
          "at the end of the pass (of the epoch without one; see TokenLoader::Next).")
      .def("state_dict", [](const TokenLoader& l) { return StateToDict(l.State()); })
      .def(
          "state_json", [](const TokenLoader& l) { return LoaderStateToJson(l.State()); },
          "The state as the core's JSON text (state() is json.loads of it).")
      .def(
          "state_at",
          [](const TokenLoader& l, Index n) {
            const TrainPlan* plan = l.train_plan();
            if (!plan) ThrowInvalid("equal_steps", "the loader packs per rank");
            LoaderState s;
            {
              ReleaseGil release;
              s.train = plan->StateAt(n);
            }
            return StateToDict(s);
          },
          "steps"_a)
      .def_prop_ro("list_size", &TokenLoader::ListSize)
      .def_prop_ro("consumers", &TokenLoader::consumers)
      .def_prop_ro("consumer", &TokenLoader::consumer);
  DefineLoaderMembers(token_loader, [](const TokenLoader& l) {
    return std::shared_ptr<const TokenLoader>(std::shared_ptr<void>(), &l);  // not owning
  });

  nb::class_<MixtureOrder>(m, "_MixtureOrder",
                           "The order of a mixture loader: its mixture and each change of "
                           "weights (shardkit/loader/mixture_loader.h).")
      .def(nb::init<Mixture, Index>(), "mixture"_a, "samples"_a)
      .def_prop_ro("samples", &MixtureOrder::samples)
      .def_prop_ro("start", &MixtureOrder::start)
      .def_prop_ro("size", &MixtureOrder::size)
      .def_prop_ro("current", [](const MixtureOrder& o) { return o.current(); })
      .def_prop_ro("changes",
                   [](const MixtureOrder& o) {
                     std::vector<Index> at;
                     for (std::size_t i = 1; i < o.pieces().size(); ++i) at.push_back(o.begin(i));
                     return at;
                   })
      .def(
          "window",
          [](const MixtureOrder& o, std::uint64_t epoch) {
            const MixtureWindow w = o.Window(epoch);
            return std::make_pair(w.first, w.count);
          },
          "epoch"_a, "(first, count): the samples epoch `epoch` reads.")
      .def(
          "numpy",
          [](const MixtureOrder& o, Index start, Index stop) {
            o.CheckWindow(start, stop);  // before stop - start sizes the arrays
            return SampleArrays("stop", static_cast<std::size_t>(stop - start),
                                [&](std::int64_t* sources, std::int64_t* items) {
                                  o.Fill(start, stop, sources, items);
                                });
          },
          "start"_a, "stop"_a, "(sources, items) of global samples [start, stop).");
  m.def(
      "_merge_loader_states",
      [](nb::list states) -> nb::object {
        // Mixture loader states (which carry their order) merge as such. Each
        // state is written as JSON once and read by the core from that text.
        std::vector<std::string> texts;
        bool mixture = false;
        for (nb::handle h : states) {
          texts.push_back(StateText(h));
          mixture = mixture || IsMixtureLoaderState(texts.back());
        }
        if (mixture) {
          std::string merged;
          {
            ReleaseGil release;
            merged = MergeMixtureLoaderStates(texts);
          }
          return JsonToPython(merged);
        }
        LoaderState merged;
        {
          ReleaseGil release;
          std::vector<LoaderState> all;
          for (const std::string& text : texts) all.push_back(LoaderStateFromJson(text));
          merged = MergeLoaderStates(all);
        }
        return StateToDict(merged);
      },
      "states"_a);
  // The core MixtureLoader behind TokenLoader.mixture: the binding converts
  // the arguments and the batches; the rules, the epochs and the state are the
  // core's. The loader's options come as the keywords of _TokenLoader (the
  // Python TokenLoader's options dict), read by the one table (ReadOptions).
  auto mixture_loader = nb::class_<MixtureLoader>(
      m, "_MixtureLoader",
      "The C++ mixture loader behind shardkit.TokenLoader.mixture "
      "(shardkit/loader/mixture_loader.h); its members are _TokenLoader's, plus the order's.");
  mixture_loader
      .def(
          "__init__",
          [](MixtureLoader* self, nb::list sources, FloatArray weights, Str by, OptionalInt block,
             nb::handle schedule, Str interpolation, Str schedule_unit, nb::handle repeat,
             std::optional<Index> samples, nb::kwargs options) {
            std::vector<std::shared_ptr<const TokenSource>> views;
            for (nb::handle h : sources) views.push_back(nb::cast<const PySource&>(h).source);
            LoaderOptions o;
            ReadOptions(options, &o, "TokenLoader.mixture");
            MixtureOptions mo = ToMixtureOptions(by, block, schedule, interpolation, schedule_unit,
                                                 repeat, static_cast<Index>(views.size()));
            mo.seed = o.seed;
            std::vector<double> w = ToDoubles(weights, "weights");
            ReleaseGil release;
            new (self) MixtureLoader(std::move(views), std::move(w), std::move(mo), o, samples);
          },
          "sources"_a, "weights"_a.none(), nb::kw_only(), "by"_a.none() = "tokens",
          "block"_a.none() = nb::none(), "schedule"_a.none() = nb::none(),
          "interpolation"_a.none() = "step", "schedule_unit"_a.none() = "samples",
          "repeat"_a.none() = true, "samples"_a.none() = nb::none(), "options"_a)
      .def(
          "next",
          [](MixtureLoader& loader, std::optional<std::uint64_t> pass) -> nb::object {
            std::optional<MixtureBatch> batch;
            {
              ReleaseGil release;
              batch = loader.Next(pass);
            }
            if (!batch) return nb::none();
            nb::dict d = BatchToDict(batch->batch);
            d["sources"] = VectorToArray(std::move(batch->sources));
            d["items"] = VectorToArray(std::move(batch->items));
            return d;
          },
          "pass"_a = nb::none(),
          "The next batch (TokenLoader's dict plus `sources` and `items` per piece), or None "
          "at the end of the epoch, after which the loader stands at the next epoch (with "
          "`pass`: None also once the loader has moved on from that pass).")
      .def(
          "load_state_dict",
          [](MixtureLoader& l, nb::handle state) {
            if (nb::isinstance<nb::list>(state) || nb::isinstance<nb::tuple>(state)) {
              std::vector<std::string> texts;
              for (nb::handle h : state) texts.push_back(StateText(h));
              ReleaseGil release;
              l.Load(std::span<const std::string>(texts));
            } else {
              const std::string text = StateText(state);
              ReleaseGil release;
              l.Load(text);
            }
          },
          "state"_a)
      .def("state_dict",
           [](const MixtureLoader& l) {
             std::string text;
             {
               ReleaseGil release;
               text = l.State();
             }
             return JsonToPython(text);
           })
      .def(
          "state_at",
          [](const MixtureLoader& l, Index steps) {
            std::string text;
            {
              ReleaseGil release;
              text = l.StateAt(steps);
            }
            return JsonToPython(text);
          },
          "steps"_a)
      .def_prop_ro("epoch", &MixtureLoader::pass_epoch)
      .def_prop_ro("standing_epoch", &MixtureLoader::epoch)
      .def_prop_ro(
          "options", [](const MixtureLoader& l) { return WriteOptions(l.loader()->options()); },
          "The current epoch's loader options as a dict.")
      .def_prop_ro("generation", &MixtureLoader::generation)
      .def_prop_ro("samples", &MixtureLoader::samples)
      .def_prop_ro("order", [](const MixtureLoader& l) { return l.order(); })
      .def_prop_ro("mixture", [](const MixtureLoader& l) { return l.mixture(); })
      .def_prop_ro("last_resume",
                   [](const MixtureLoader& l) -> nb::object {
                     if (!l.last_resume()) return nb::none();
                     const auto& r = *l.last_resume();
                     return nb::make_tuple(r.changed, r.read, r.at);
                   })
      .def(
          "locate",
          [](const MixtureLoader& l, std::uint64_t epoch, Index start, Index stop) {
            const MixtureWindow w = l.order().Window(epoch);
            if (start < 0 || stop < start || stop > w.count) {
              ThrowOutOfRange("stop", "[" + shardkit::Str(start) + ", " + shardkit::Str(stop) +
                                          ") is outside the window's " + shardkit::Str(w.count));
            }
            std::vector<Index> sources(static_cast<std::size_t>(stop - start));
            std::vector<Index> items(sources.size());
            {
              ReleaseGil release;
              l.order().Fill(w.first + start, w.first + stop, sources.data(), items.data());
            }
            return std::make_pair(VectorToArray(std::move(sources)),
                                  VectorToArray(std::move(items)));
          },
          "epoch"_a, "start"_a, "stop"_a,
          "(sources, items) of window documents [start, stop) of epoch `epoch`.");
  DefineLoaderMembers(mixture_loader, [](const MixtureLoader& l) { return l.loader(); });
  // shardkit.save_state's writer: the core's one atomic file write
  // (shardkit/base/atomic_file.h), so a kill or a full disk leaves the previous
  // file whole. Errors are a ValueError naming `param`, the path and errno's text.
  m.def(
      "_write_file_atomically",
      [](const std::string& path, nb::bytes data, const std::string& param) {
        const std::string_view contents(data.c_str(), data.size());
        ReleaseGil release;
        WriteFileAtomically(path, contents, param);
      },
      "path"_a, "data"_a, "param"_a);
}

}  // namespace shardkit::python
