// gossamer._core: the Python extension over the public C++ API.
//
// Thin on purpose: arguments are checked here (dtype, shape, contiguity,
// writability) and handed to the C++ objects as spans over the caller's own
// memory, with the GIL released while C++ works. The pure-Python package
// (gossamer/__init__.py, gossamer/torch.py) adds torch tensors, launcher
// discovery and the torch.optim wrapper on top. C++ exceptions become the
// Python classes of the same name (gossamer.PeerFailure, ...), message kept.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "../../common/builtins.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/launch_env.hpp"
#include "gossamer/optimizers/optimizers.hpp"
#include "gossamer/registry.hpp"
#include "gossamer/session.hpp"
#include "gossamer/store.hpp"
#include "gossamer/topologies/topologies.hpp"
#include "gossamer/transports/builtins.hpp"
#include "gossamer/transports/zmq.hpp"

namespace py = pybind11;
using namespace gossamer;

namespace {

// ---- arrays -----------------------------------------------------------------

enum class DType { kFloat32, kFloat64, kFloat16, kBfloat16 };

// Whether this host stores the low byte first.
bool littleEndianHost() {
  const std::uint16_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

// NumPy's name for a buffer format, e.g. "float32" for "f" or "<f", with the
// byte order named when it is not the host's ("float32, big-endian" for ">f"
// on x86), which the collectives do not take.
std::string dtypeName(const py::buffer_info& b) {
  std::string f = b.format;
  std::string order;
  if (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@' || f[0] == '>' || f[0] == '!')) {
    const bool big = f[0] == '>' || f[0] == '!';
    if ((big && littleEndianHost()) || (f[0] == '<' && !littleEndianHost()))
      order = big ? ", big-endian" : ", little-endian";
    f = f.substr(1);
  }
  const std::string bits = std::to_string(8 * b.itemsize);
  if (f == "f" || f == "d" || f == "e") return "float" + bits + order;
  if (f == "b" || f == "h" || f == "i" || f == "l" || f == "q") return "int" + bits + order;
  if (f == "B" || f == "H" || f == "I" || f == "L" || f == "Q") return "uint" + bits + order;
  if (f == "?") return "bool";
  return "format '" + b.format + "'";
}

std::string describe(const py::buffer_info& b) {
  std::ostringstream os;
  os << "shape (";
  for (std::size_t i = 0; i < b.shape.size(); ++i) os << (i ? ", " : "") << b.shape[i];
  os << (b.shape.size() == 1 ? ",)" : ")") << ", dtype " << dtypeName(b);
  return os.str();
}

// A writable, C-contiguous buffer of the caller's memory: float32, or (for
// the collectives) float64, float16 and bfloat16.
struct Array {
  py::buffer_info info;
  DType dtype;
  std::size_t size;
  template <typename T>
  std::span<T> as() {
    return {static_cast<T*>(info.ptr), size};
  }
  // fn(std::span<T>) with T the element type of `dtype`.
  template <typename F>
  void visit(F&& fn) {
    switch (dtype) {
      case DType::kFloat64:
        fn(as<double>());
        break;
      case DType::kFloat16:
        fn(as<float16>());
        break;
      case DType::kBfloat16:
        fn(as<bfloat16>());
        break;
      default:
        fn(as<float>());
    }
  }
};

bool hasFormat(const py::buffer_info& b, char f) {
  return b.format.size() == 1
             ? b.format[0] == f
             : b.format.size() == 2 && (b.format[0] == '<' || b.format[0] == '=') && b.format[1] == f;
}

// The element type of `b`: float32 always; float64 and float16 when `wide`; a
// buffer of 16-bit integers that the Python side viewed from a torch.bfloat16
// or torch.float16 tensor when `half` names that dtype. Nullopt otherwise.
std::optional<DType> elementType(const py::buffer_info& b, bool wide, const std::string& half) {
  if (!half.empty()) {
    if (b.itemsize != 2 || !(hasFormat(b, 'h') || hasFormat(b, 'H') || hasFormat(b, 'e')))
      return std::nullopt;
    if (half == "bfloat16") return DType::kBfloat16;
    if (half == "float16") return DType::kFloat16;
    throw py::value_error("dtype must be 'bfloat16' or 'float16'; got '" + half + "'");
  }
  if (b.itemsize == 4 && hasFormat(b, 'f')) return DType::kFloat32;
  if (wide && b.itemsize == 8 && hasFormat(b, 'd')) return DType::kFloat64;
  if (wide && b.itemsize == 2 && hasFormat(b, 'e')) return DType::kFloat16;
  return std::nullopt;
}

// `wide`: float64 and the 16-bit types are accepted too (the collectives);
// `half`: "bfloat16" or "float16" for 16-bit integer buffers holding those bits.
Array checkedArray(const py::buffer& obj, const char* name, bool wide, const std::string& half = "") {
  py::buffer_info b = obj.request(/*writable=*/false);
  const auto dtype = elementType(b, wide, half);
  if (!dtype)
    throw py::type_error(std::string(name) + " must hold " +
                         (wide ? "float32, float64, float16 or bfloat16" : "float32") + " elements; got " +
                         describe(b));
  if (b.readonly) throw py::value_error(std::string(name) + " is read-only (" + describe(b) + ")");
  py::ssize_t expect = b.itemsize;
  for (auto d = static_cast<py::ssize_t>(b.ndim) - 1; d >= 0; --d) {
    const auto i = static_cast<std::size_t>(d);
    if (b.shape[i] > 1 && b.strides[i] != expect)
      throw py::value_error(
          std::string(name) + " is not contiguous (" + describe(b) +
          "): pass a C-contiguous array, e.g. numpy.ascontiguousarray or tensor.contiguous()");
    expect *= b.shape[i];
  }
  std::size_t n = 1;
  for (auto s : b.shape) n *= static_cast<std::size_t>(s);
  return Array{std::move(b), *dtype, n};
}

Array float32Array(const py::buffer& obj, const char* name,
                   std::optional<std::size_t> length = std::nullopt) {
  Array a = checkedArray(obj, name, false);
  if (length && a.size != *length)
    throw py::value_error(std::string(name) + " has " + std::to_string(a.size) + " elements, expected " +
                          std::to_string(*length) + " (" + describe(a.info) + ")");
  return a;
}

ReduceOp parseOp(const std::string& op) {
  if (op == "sum") return ReduceOp::kSum;
  if (op == "average" || op == "mean") return ReduceOp::kAverage;
  if (op == "max") return ReduceOp::kMax;
  if (op == "min") return ReduceOp::kMin;
  throw py::value_error("op must be 'sum', 'average' (or 'mean'), 'max' or 'min'; got '" + op + "'");
}

// ---- components ---------------------------------------------------------------

using gossamer::bindings::builtins;
using gossamer::bindings::loadConfig;

// ---- the optimizer handle -------------------------------------------------------

// A DistributedOptimizer owned by an Agent (its Session's); the Python object
// keeps the Agent alive (py::keep_alive).
class PyAgent;

// Python's Optimizer: the agent's optimizer as make_optimizer built it. A
// later make_optimizer replaces (and destroys) it, so each call checks that
// it is still the agent's.
struct OptimizerHandle {
  DistributedOptimizer* opt;
  std::size_t size;
  PyAgent* agent;            // kept alive by make_optimizer's keep_alive
  std::uint64_t generation;  // the agent's make_optimizer count when it was made
  /// @throws InvalidArgument if its Agent was closed or aborted (which
  /// destroyed the optimizer), or a later make_optimizer replaced it.
  DistributedOptimizer& get() const;
};

// ---- the Agent --------------------------------------------------------------------

// Python's Agent: a gossamer::Session (the rank's Agent and the elastic
// protocol: its optimizer survives view changes, survive() redoes the
// caller's own collectives over the survivors) and its rendezvous.
class PyAgent {
 public:
  PyAgent(const Config& config, int rank, const std::string& rendezvous, double storeTimeout)
      : records_(std::make_shared<RecordQueue>()) {
    rv_ = std::make_unique<zmq::Rendezvous>(rendezvous, rank, storeTimeout);
    try {
      session_ = std::make_unique<Session>(config, rank, rv_->store(), builtins());
    } catch (...) {
      rv_->giveBack();  // a retry in this process meets the other ranks' same Agent
      throw;
    }
    // Records queue up here (no GIL needed on the threads that make them)
    // until Python takes them with Agent.metrics().
    session_->agent().metrics().subscribe([q = records_](const MetricsRecord& r) { q->push(r.json); });
  }
  Session& session() {
    if (!session_) throw InvalidArgument("the agent is closed");
    return *session_;
  }
  Agent& agent() { return session().agent(); }
  /// How many optimizers make_optimizer built (the last one is the agent's).
  std::uint64_t optimizerGeneration() const { return optimizerGeneration_; }
  std::uint64_t newOptimizerGeneration() { return ++optimizerGeneration_; }
  void close() {
    if (session_) session_->close();
    session_.reset();
    rv_.reset();
  }
  void abort() {
    if (session_) session_->abort();
    session_.reset();
    rv_.reset();
  }
  bool closed() const { return session_ == nullptr; }
  /// The round of the next exchange(): 0 again once a new view is installed
  /// (every survivor starts the new view's exchanges at 0, whichever round
  /// each was at when the old one failed).
  std::uint64_t& exchangeRound() {
    const std::uint64_t view = session_->elastic() ? session_->view().number : 0;
    if (view != exchangeView_) {
      exchangeView_ = view;
      exchangeRound_ = 0;
    }
    return exchangeRound_;
  }

  /// Metrics records (JSON text) not yet taken by Python: at most kCapacity,
  /// the oldest dropped beyond that (and counted).
  struct RecordQueue {
    static constexpr std::size_t kCapacity = 65536;
    std::mutex mu;
    std::deque<std::string> lines;
    std::uint64_t dropped = 0;
    void push(const std::string& json) {
      std::lock_guard<std::mutex> lk(mu);
      if (lines.size() == kCapacity) {
        lines.pop_front();
        ++dropped;
      }
      lines.push_back(json);
    }
    std::vector<std::string> take() {
      std::lock_guard<std::mutex> lk(mu);
      std::vector<std::string> out(std::make_move_iterator(lines.begin()),
                                   std::make_move_iterator(lines.end()));
      lines.clear();
      return out;
    }
  };
  RecordQueue& records() { return *records_; }

 private:
  std::shared_ptr<RecordQueue> records_;  // shared with the Agent's subscription
  std::unique_ptr<zmq::Rendezvous> rv_;   // declared first: destroyed after the Session
  std::unique_ptr<Session> session_;
  std::uint64_t exchangeRound_ = 0;
  std::uint64_t exchangeView_ = 0;  // the view exchangeRound_ counts in
  std::uint64_t optimizerGeneration_ = 0;
};

DistributedOptimizer& OptimizerHandle::get() const {
  if (agent->closed())
    throw InvalidArgument(
        "this Optimizer's Agent is closed (Agent.close or Agent.abort destroyed its optimizer); "
        "make a new Agent and call make_optimizer on it");
  if (agent->optimizerGeneration() != generation)
    throw InvalidArgument(
        "this Optimizer was replaced by a later Agent.make_optimizer (an agent keeps one; "
        "a second DistributedOptimizer on the same agent replaces the first)");
  return *opt;
}

// The collectives options of one call: the communicator's, with `algorithm`
// (an allreduce_algorithms() name) when given.
// @throws ValueError for an unknown algorithm.
CollectiveOptions optionsWith(const Communicator& comm, const std::optional<std::string>& algorithm) {
  CollectiveOptions o = comm.options();
  if (!algorithm) return o;
  try {
    o.algorithm = parseAllreduceAlgorithm(*algorithm);
  } catch (const InvalidArgument& e) {
    throw py::value_error(std::string("algorithm: ") + e.what());
  }
  return o;
}

// Runs fn() with the communicator's options set to `o` for its calls, then
// restores them, also when fn throws.
template <typename F>
void withOptions(Communicator& comm, const CollectiveOptions& o, F&& fn) {
  const CollectiveOptions saved = comm.options();
  comm.setOptions(o);
  try {
    fn();
  } catch (...) {
    comm.setOptions(saved);
    throw;
  }
  comm.setOptions(saved);
}

void pyAllreduce(PyAgent& self, const py::buffer& data, const std::string& op,
                 const std::optional<std::string>& algorithm, const std::string& half) {
  Array a = checkedArray(data, "data", true, half);
  const ReduceOp rop = parseOp(op);
  Communicator& comm = self.agent().communicator();
  const CollectiveOptions o = optionsWith(comm, algorithm);
  py::gil_scoped_release release;
  withOptions(comm, o, [&] { a.visit([&](auto span) { comm.allreduce(span, rop); }); });
}

// A non-blocking allreduce's handle for Python: the Work, and the array it
// writes into, kept (with its buffer export) until the collective is done.
struct PyWork {
  Work work;
  std::shared_ptr<Array> array;
  // Waits (without the GIL) for the collective before the buffer is released:
  // the communication thread may still be writing into it.
  ~PyWork() {
    if (!work.valid()) return;
    py::gil_scoped_release release;
    try {
      work.wait();
    } catch (...) {
      // Its error belongs to wait(); dropping the handle only waits.
    }
  }
};

std::unique_ptr<PyWork> pyAllreduceAsync(PyAgent& self, const py::buffer& data, const std::string& op,
                                         const std::optional<std::string>& algorithm,
                                         const std::string& half) {
  auto w = std::make_unique<PyWork>();
  w->array = std::make_shared<Array>(checkedArray(data, "data", true, half));
  const ReduceOp rop = parseOp(op);
  Communicator& comm = self.agent().communicator();
  // The options are captured by the call, so they can be restored at once.
  withOptions(comm, optionsWith(comm, algorithm),
              [&] { w->array->visit([&](auto span) { w->work = comm.iallreduce(span, rop); }); });
  return w;
}

void pyBroadcast(PyAgent& self, const py::buffer& data, int root, const std::string& half) {
  Array a = checkedArray(data, "data", true, half);
  Communicator& comm = self.agent().communicator();
  if (root < 0 || root >= comm.worldSize())
    throw py::value_error("root " + std::to_string(root) + " outside [0, " +
                          std::to_string(comm.worldSize()) + ")");
  py::gil_scoped_release release;
  a.visit([&](auto span) { comm.broadcast(span, root); });
}

// ---- exceptions ---------------------------------------------------------------------

// The Python classes, created in PYBIND11_MODULE.
struct Exceptions {
  PyObject* error = nullptr;
  PyObject* invalidArgument = nullptr;
  PyObject* internal = nullptr;
  PyObject* config = nullptr;
  PyObject* protocol = nullptr;
  PyObject* timeout = nullptr;
  PyObject* peerFailure = nullptr;
  PyObject* viewChanged = nullptr;
  PyObject* expelled = nullptr;
  PyObject* cancelled = nullptr;
};
Exceptions exc;

PyObject* newException(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("gossamer.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(type));
  return type;
}

void raise(PyObject* type, const std::exception& e,
           std::initializer_list<std::pair<const char*, py::object>> attrs) {
  py::object instance = py::reinterpret_steal<py::object>(PyObject_CallFunction(type, "s", e.what()));
  if (!instance) return;  // the call set a Python error already
  for (const auto& [k, v] : attrs) instance.attr(k) = v;
  PyErr_SetObject(type, instance.ptr());
}

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const ConfigError& e) {
    raise(exc.config, e,
          {{"file", py::str(e.file())}, {"line", py::int_(e.line())}, {"key", py::str(e.key())}});
  } catch (const ProtocolError& e) {
    raise(exc.protocol, e, {{"peer", py::int_(e.peer())}, {"offset", py::int_(e.offset())}});
  } catch (const Expelled& e) {
    raise(exc.expelled, e, {{"peer", py::int_(e.peer())}});
  } catch (const ViewChanged& e) {
    raise(exc.viewChanged, e, {{"peer", py::int_(e.peer())}});
  } catch (const PeerFailure& e) {
    raise(exc.peerFailure, e, {{"peer", py::int_(e.peer())}});
  } catch (const TimeoutError& e) {
    raise(exc.timeout, e, {});
  } catch (const Cancelled& e) {
    raise(exc.cancelled, e, {});
  } catch (const InternalError& e) {
    raise(exc.internal, e, {});
  } catch (const InvalidArgument& e) {
    raise(exc.invalidArgument, e, {});
  } catch (const Error& e) {
    raise(exc.error, e, {});
  }
}

// A ViewChange as Python sees it.
py::dict changeDict(const ViewChange& c) {
  py::dict d;
  d["number"] = c.view.number;
  d["members"] = c.view.members;
  d["lost"] = c.lost;
  d["joined"] = c.joined;
  d["resume_step"] = c.resumeStep;
  d["seconds"] = c.seconds;
  return d;
}

// Session::survive over a Python callable: the callable runs with the GIL,
// and a gossamer.PeerFailure or TimeoutError it raises (a collective of its
// own failed) becomes the C++ exception again, so that the survivors agree
// on a view and run it again (a TimeoutError only when the view is revoked
// within Session::survive's grace); anything else propagates as it is.
bool pySurvive(PyAgent& a, const py::function& fn) {
  Session& session = a.session();
  py::gil_scoped_release release;
  return session.survive([&] {
    py::gil_scoped_acquire acquire;
    try {
      fn();
    } catch (py::error_already_set& e) {
      const int peer = e.value() && py::hasattr(e.value(), "peer") ? e.value().attr("peer").cast<int>() : -1;
      if (e.matches(exc.expelled)) throw Expelled(peer, py::str(e.value()).cast<std::string>());
      if (e.matches(exc.peerFailure)) throw PeerFailure(peer, py::str(e.value()).cast<std::string>());
      // As in C++: a timeout while the view is being revoked (a peer stalled
      // past transport.timeout_seconds but not yet past suspect_seconds, or
      // this rank was stopped) is a view change, not an error.
      if (e.matches(exc.timeout)) throw TimeoutError(py::str(e.value()).cast<std::string>());
      throw;
    }
  });
}

void defineExceptions(py::module_& m) {
  exc.error = newException(m, "Error", PyExc_RuntimeError, "Base class of every error raised by Gossamer.");
  {
    py::tuple bases = py::make_tuple(py::handle(exc.error), py::handle(PyExc_ValueError));
    exc.invalidArgument = newException(m, "InvalidArgument", bases.ptr(),
                                       "A bad argument to a Gossamer call (also a ValueError).");
  }
  exc.internal = newException(m, "InternalError", exc.error,
                              "A broken invariant inside Gossamer: a bug, worth a report.");
  exc.config =
      newException(m, "ConfigError", exc.error,
                   "A configuration error; .file, .line (1-based, 0 if unknown) and .key locate it.");
  exc.protocol =
      newException(m, "ProtocolError", exc.error,
                   "A malformed frame from a peer; .peer (rank, -1 if unknown) and .offset (bytes).");
  {
    py::tuple bases = py::make_tuple(py::handle(exc.error), py::handle(PyExc_TimeoutError));
    exc.timeout = newException(m, "TimeoutError", bases.ptr(),
                               "A network wait that did not complete within its timeout (also the built-in "
                               "TimeoutError).");
  }
  exc.peerFailure = newException(m, "PeerFailure", exc.error,
                                 "A peer left or died while others still needed it; .peer is its rank.");
  exc.viewChanged = newException(
      m, "ViewChanged", exc.peerFailure,
      "The membership view was revoked (a peer died or fell silent): Agent.survive() and the optimizer "
      "recover by themselves, or call Agent.recover(); .peer "
      "is the rank suspected first (-1 if unknown).");
  exc.expelled =
      newException(m, "Expelled", exc.peerFailure,
                   "This rank was removed from the job by its peers (it was silent too long); .peer "
                   "is this rank.");
  exc.cancelled = newException(m, "Cancelled", exc.error, "A request cancelled before it completed.");
  py::register_exception_translator(&translate);
}

void defineFunctions(py::module_& m) {
  m.def(
      "discover_launch",
      []() -> std::optional<py::dict> {
        auto l = discoverLaunch();
        if (!l) return std::nullopt;
        py::dict d;
        d["launcher"] = l->launcher;
        d["rank"] = l->rank;
        d["world_size"] = l->worldSize;
        d["rendezvous"] = l->rendezvous;
        return d;
      },
      "The launcher's view of this process (see gossamer.discover_launch).");

  m.def(
      "check_config",
      [](const std::string& source, bool isText, const std::vector<std::string>& overrides) {
        const Config c = loadConfig(source, isText, overrides);
        return c.worldSize();
      },
      py::arg("source"), py::arg("is_text"), py::arg("overrides"),
      "Loads and validates a config; returns its world size. Raises ConfigError.");

  m.def(
      "allreduce_algorithms",
      [] {
        std::vector<std::string> out;
        for (std::size_t i = 0; i < kAllreduceAlgorithmCount; ++i)
          out.emplace_back(toString(static_cast<AllreduceAlgorithm>(i)));
        return out;
      },
      "Names accepted by Agent.allreduce(algorithm=...).");
}

void defineOptimizer(py::module_& m) {
  py::class_<OptimizerHandle>(
      m, "Optimizer",
      "The configured training algorithm of an Agent over a flat float32 parameter vector, as "
      "Agent.make_optimizer(tensor_sizes) built it (not constructed directly). Its arrays are NumPy "
      "float32 arrays or CPU float32 torch tensors, C-contiguous and writable, of exactly `size` "
      "elements (any shape). Every method raises InvalidArgument once the agent is closed or aborted, "
      "or once a later make_optimizer replaced this optimizer (an agent keeps one).")
      .def_property_readonly(
          "name", [](const OptimizerHandle& h) { return h.get().name(); },
          "The algorithm's name (str), e.g. 'allreduce_sgd' or 'crossover_sgd', with its compressor's "
          "when one wraps it. Raises InvalidArgument as every method.")
      .def_property_readonly(
          "size", [](const OptimizerHandle& h) { return h.size; },
          "Elements of the flat parameter vector (int): sum(tensor_sizes) of make_optimizer; the length of "
          "every array passed to the methods.")
      .def_property_readonly(
          "steps", [](const OptimizerHandle& h) { return h.get().steps(); },
          "Steps completed (int): step() or mix_parameters() calls that counted. With the membership "
          "service a view change may move it: a rank behind the survivors skips to their step. Raises "
          "InvalidArgument as every method.")
      .def_property_readonly(
          "has_communication_only_form",
          [](const OptimizerHandle& h) { return h.get().hasCommunicationOnlyForm(); },
          "Whether the algorithm splits into reduce_gradients() before, and mix_parameters() after, a "
          "local step made elsewhere (bool; gossamer.torch.DistributedOptimizer needs it). Raises "
          "InvalidArgument as every method.")
      .def(
          "step",
          [](OptimizerHandle& h, const py::buffer& params, const py::buffer& grads) {
            Array p = float32Array(params, "params", h.size), g = float32Array(grads, "grads", h.size);
            py::gil_scoped_release release;
            h.get().step(p.as<float>(), g.as<const float>());
          },
          py::arg("params"), py::arg("grads"),
          "One training step: the C++ local SGD step and the algorithm's exchange, on float32 arrays of "
          "`size` "
          "elements (params updated in place). Raises ValueError/TypeError for bad arrays, PeerFailure, "
          "TimeoutError.")
      .def(
          "reduce_gradients",
          [](OptimizerHandle& h, const py::buffer& grads) {
            Array g = float32Array(grads, "grads", h.size);
            py::gil_scoped_release release;
            h.get().reduceGradients(g.as<float>());
          },
          py::arg("grads"),
          "Communication-only form, before a local step made elsewhere: averages `grads` (float32, `size`) "
          "in "
          "place for allreduce-style algorithms; gossip algorithms leave it. Raises as step.")
      .def_property_readonly(
          "replicated_model", [](const OptimizerHandle& h) { return h.get().replicatedModel(); },
          "Whether every rank holds the same model after each step (bool: AllReduce-SGD, a compressor "
          "whose decoded average is the same everywhere); after a view change a rank behind takes the "
          "survivors' model. Raises InvalidArgument as every method.")
      .def_property_readonly(
          "skips_local_step", [](const OptimizerHandle& h) { return h.get().skipsLocalStep(); },
          "True after a reduce_gradients() that leaves this step out (bool): with the membership service a "
          "view change inside it found this rank behind the survivors (or rejoining); it takes their step "
          "count and, for a replicated model, their model. Make no local step then, and call "
          "mix_parameters(), which exchanges nothing. Raises InvalidArgument as every method.")
      .def(
          "mix_parameters",
          [](OptimizerHandle& h, const py::buffer& params) {
            Array p = float32Array(params, "params", h.size);
            py::gil_scoped_release release;
            h.get().mixParameters(p.as<float>());
          },
          py::arg("params"),
          "Communication-only form, after the local step: mixes `params` (float32, `size`) in place with the "
          "peers' for gossip algorithms, and counts the step. Raises as step.")
      .def(
          "flush",
          [](OptimizerHandle& h, const py::buffer& params) {
            Array p = float32Array(params, "params", h.size);
            py::gil_scoped_release release;
            h.get().flush(p.as<float>());
          },
          py::arg("params"), "Completes an exchange still in flight (overlap mode) into `params`.")
      .def(
          "set_total_steps", [](OptimizerHandle& h, std::uint64_t n) { h.get().setTotalSteps(n); },
          py::arg("total_steps"), "Announces the run's length in steps (A2SGD's final synchronisation).");
}

void defineAgentCollectives(py::class_<PyAgent>& cls) {
  py::class_<PyWork>(cls, "Work", "A non-blocking allreduce (Agent.allreduce_async).")
      .def(
          "wait",
          [](PyWork& w, std::optional<double> timeout) {
            py::gil_scoped_release release;
            if (timeout)
              w.work.wait(*timeout);
            else
              w.work.wait();
          },
          py::arg("timeout") = py::none(),
          "Blocks until the allreduce is done; raises its error (PeerFailure, TimeoutError), or "
          "TimeoutError after `timeout` seconds if given.")
      .def(
          "is_completed", [](const PyWork& w) { return w.work.test(); },
          "True once the allreduce has finished, successfully or not.");
  cls.def("allreduce", &pyAllreduce, py::arg("data"), py::arg("op") = "average",
          py::arg("algorithm") = py::none(), py::arg("dtype") = "")
      .def("allreduce_async", &pyAllreduceAsync, py::arg("data"), py::arg("op") = "average",
           py::arg("algorithm") = py::none(), py::arg("dtype") = "")
      .def("broadcast", &pyBroadcast, py::arg("data"), py::arg("root") = 0, py::arg("dtype") = "")
      .def("barrier", [](PyAgent& a) {
        Communicator& c = a.agent().communicator();
        py::gil_scoped_release release;
        c.barrier();
      });
}

void defineAgentTraining(py::class_<PyAgent>& cls) {
  cls.def(
         "make_optimizer",
         [](PyAgent& a, const std::vector<std::size_t>& tensorSizes) {
           std::size_t n = 0;
           for (auto s : tensorSizes) n += s;
           Session& session = a.session();
           const std::uint64_t generation = a.newOptimizerGeneration();
           py::gil_scoped_release release;
           return OptimizerHandle{&session.makeOptimizer(tensorSizes), n, &a, generation};
         },
         py::arg("tensor_sizes"), py::keep_alive<0, 1>())
      .def(
          "exchange",
          [](PyAgent& a, const py::buffer& params) {
            Array p = float32Array(params, "params");
            Agent& agent = a.agent();
            DistributedOptimizer* opt = nullptr;
            try {
              opt = &agent.optimizer();
            } catch (const InvalidArgument&) {
            }
            ModelExchange exchange = opt != nullptr ? opt->modelExchange() : ModelExchange{};
            if (!exchange)
              throw InvalidArgument(
                  "exchange: the agent has no optimizer with a model exchange (algorithm '" +
                  agent.config().get<std::string>("algorithm.name") +
                  "'): call make_optimizer first, with a gossip algorithm");
            std::uint64_t& round = a.exchangeRound();
            py::gil_scoped_release release;
            exchange(p.as<float>(), round);
            ++round;  // a failed exchange takes no round: the next try repeats it
          },
          py::arg("params"));
}

void defineAgentMembership(py::class_<PyAgent>& cls) {
  cls.def_property_readonly("has_membership", [](PyAgent& a) { return a.session().elastic(); })
      .def_property_readonly("view",
                             [](PyAgent& a) {
                               const View v = a.agent().view();
                               py::dict d;
                               d["number"] = v.number;
                               d["coordinator"] = v.coordinator;
                               d["members"] = v.members;
                               return d;
                             })
      .def("recover",
           [](PyAgent& a) {
             Session& session = a.session();
             ViewChange c;
             {
               py::gil_scoped_release release;
               c = session.recover();
             }
             return changeDict(c);
           })
      .def_property_readonly("view_changes",
                             [](PyAgent& a) {
                               py::list out;
                               for (const ViewChange& c : a.session().viewChanges())
                                 out.append(changeDict(c));
                               return out;
                             })
      .def("survive", &pySurvive, py::arg("fn"));
}

void defineAgentMetrics(py::class_<PyAgent>& cls) {
  cls.def("stats",
          [](PyAgent& a) {
            const TransportStats s = a.agent().transport().stats();
            py::dict d;
            d["bytes_sent"] = s.bytesSent;
            d["bytes_received"] = s.bytesReceived;
            d["messages_sent"] = s.messagesSent;
            d["messages_received"] = s.messagesReceived;
            return d;
          })
      .def("take_metrics", [](PyAgent& a) { return a.records().take(); })
      .def_property_readonly("metrics_dropped",
                             [](PyAgent& a) {
                               std::lock_guard<std::mutex> lk(a.records().mu);
                               return a.records().dropped;
                             })
      .def_property_readonly("run_dir", [](PyAgent& a) { return a.agent().metrics().dir(); })
      .def(
          "emit_metrics",
          [](PyAgent& a, const std::string& kind, std::uint64_t step,
             const std::vector<std::pair<std::string, std::string>>& fields) {
            MetricFields f;
            for (const auto& [name, text] : fields) f.emplace_back(name, JsonText{text});
            Metrics& m = a.agent().metrics();
            py::gil_scoped_release release;
            m.emit(kind, step, f);
          },
          py::arg("kind"), py::arg("step"), py::arg("fields"))
      .def(
          "note_metric",
          [](PyAgent& a, const std::string& name, double value) {
            Metrics& m = a.agent().metrics();
            py::gil_scoped_release release;
            m.note(name, value);
          },
          py::arg("name"), py::arg("value"))
      .def("close",
           [](PyAgent& a) {
             py::gil_scoped_release release;
             a.close();
           })
      .def("abort", [](PyAgent& a) {
        py::gil_scoped_release release;
        a.abort();
      });
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "Gossamer's C++ core (use the 'gossamer' package, which wraps it).";
  defineExceptions(m);
  defineFunctions(m);
  defineOptimizer(m);
  py::class_<PyAgent> cls(m, "Agent");
  cls.def(py::init([](const std::string& source, bool isText, const std::vector<std::string>& overrides,
                      int rank, const std::string& rendezvous) {
            const Config c = loadConfig(source, isText, overrides);
            if (rank < 0 || rank >= c.worldSize())
              throw InvalidArgument("rank " + std::to_string(rank) + " outside [0, " +
                                    std::to_string(c.worldSize()) + ")");
            py::gil_scoped_release release;
            return std::make_unique<PyAgent>(c, rank, rendezvous, c.get<double>("transport.timeout_seconds"));
          }),
          py::arg("source"), py::arg("is_text"), py::arg("overrides"), py::arg("rank"), py::arg("rendezvous"))
      .def_property_readonly("rank", [](PyAgent& a) { return a.agent().rank(); })
      .def_property_readonly("world_size", [](PyAgent& a) { return a.agent().worldSize(); })
      .def_property_readonly("algorithm",
                             [](PyAgent& a) { return a.agent().config().get<std::string>("algorithm.name"); })
      .def_property_readonly("transport_kind",
                             [](PyAgent& a) { return a.agent().config().get<std::string>("transport.kind"); })
      .def_property_readonly(
          "timeout_seconds",
          [](PyAgent& a) { return a.agent().config().get<double>("transport.timeout_seconds"); })
      .def_property_readonly("closed", &PyAgent::closed);
  defineAgentCollectives(cls);
  defineAgentTraining(cls);
  defineAgentMembership(cls);
  defineAgentMetrics(cls);
}
