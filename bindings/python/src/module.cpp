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

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../../common/builtins.hpp"
#include "../../common/view_rank.hpp"
#include "errors.hpp"
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
using gossamer::bindings::textOf;

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
// or torch.float16 tensor when `half` names that dtype (float16 may also come
// as NumPy float16, format 'e'; bfloat16 only as 16-bit integers, never as
// float16, whose bits mean other values). Nullopt otherwise.
std::optional<DType> elementType(const py::buffer_info& b, bool wide, const std::string& half) {
  if (!half.empty()) {
    const bool ints = hasFormat(b, 'h') || hasFormat(b, 'H');
    if (b.itemsize != 2 || !(ints || (half == "float16" && hasFormat(b, 'e')))) return std::nullopt;
    return half == "bfloat16" ? DType::kBfloat16 : DType::kFloat16;
  }
  if (b.itemsize == 4 && hasFormat(b, 'f')) return DType::kFloat32;
  if (wide && b.itemsize == 8 && hasFormat(b, 'd')) return DType::kFloat64;
  if (wide && b.itemsize == 2 && hasFormat(b, 'e')) return DType::kFloat16;
  return std::nullopt;
}

// `obj`'s type, "module.Name" ("Name" for a built-in type), for messages.
std::string typeName(const py::handle& obj) {
  const py::handle t = py::type::handle_of(obj);
  const auto module = py::str(t.attr("__module__")).cast<std::string>();
  const auto name = py::str(t.attr("__qualname__")).cast<std::string>();
  return module == "builtins" ? name : module + "." + name;
}

// `wide`: float64 and the 16-bit types are accepted too (the collectives);
// `half`: "bfloat16" or "float16" for 16-bit integer buffers holding those bits.
// @throws TypeError (not a buffer, another element type), ValueError (an
// unknown `half`, read-only, not aligned to its elements, not C-contiguous).
Array checkedArray(const py::object& obj, const char* name, bool wide, const std::string& half = "") {
  if (!half.empty() && half != "bfloat16" && half != "float16")
    throw py::value_error(
        "dtype must be '' (the buffer's own element type), 'bfloat16' or 'float16' (a "
        "buffer of 16-bit integers holding those bits); got '" +
        half + "'");
  if (PyObject_CheckBuffer(obj.ptr()) == 0)
    throw py::type_error(std::string(name) +
                         " must be a NumPy array (or another object with the buffer protocol), not " +
                         typeName(obj) + " (for a CPU torch tensor pass tensor.detach().numpy())");
  py::buffer_info b = py::reinterpret_borrow<py::buffer>(obj).request(/*writable=*/false);
  const auto dtype = elementType(b, wide, half);
  if (!dtype) {
    const std::string want =
        !half.empty() ? "16-bit integer (the bits of " + half + ")" + (half == "float16" ? " or float16" : "")
        : wide        ? "float32, float64, float16 or bfloat16"
                      : "float32";
    throw py::type_error(std::string(name) + " must hold " + want + " elements; got " + describe(b));
  }
  if (b.readonly) throw py::value_error(std::string(name) + " is read-only (" + describe(b) + ")");
  if (reinterpret_cast<std::uintptr_t>(b.ptr) % static_cast<std::uintptr_t>(b.itemsize) != 0)
    throw py::value_error(std::string(name) + " is not aligned to its " + std::to_string(b.itemsize) +
                          "-byte elements (" + describe(b) + "): pass a copy, e.g. numpy.array(x)");
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

Array float32Array(const py::object& obj, const char* name,
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

// ---- integers -----------------------------------------------------------------

// `v` as an int (a Python int or an object with __index__, e.g. a NumPy
// integer; not a bool, not a float). @throws TypeError naming `name`.
py::int_ integerOf(const py::handle& v, const std::string& name) {
  if (PyBool_Check(v.ptr()) != 0 || PyIndex_Check(v.ptr()) == 0)
    throw py::type_error(name + " must be an int, got " + typeName(v) + " " +
                         py::repr(v).cast<std::string>());
  PyObject* i = PyNumber_Index(v.ptr());
  if (i == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::int_>(i);
}

// `v` (an int, see integerOf) in [0, max].
// @throws TypeError, InvalidArgument (outside the range) naming `name`.
std::uint64_t unsignedOf(const py::handle& v, const std::string& name,
                         std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
  const py::int_ i = integerOf(v, name);
  const auto u = PyLong_AsUnsignedLongLong(i.ptr());
  if (PyErr_Occurred() != nullptr) {
    PyErr_Clear();  // negative, or past 64 bits
  } else if (u <= max) {
    return u;
  }
  throw InvalidArgument(name + " " + py::str(static_cast<const py::object&>(i)).cast<std::string>() +
                        " outside [0, " + std::to_string(max) + "]");
}

// make_optimizer's tensor_sizes: element counts, each > 0, adding up to at
// most kMaxModelElements (so that a model's bytes, and those of an optimizer
// state of 8-byte elements, fit in a ptrdiff_t).
constexpr std::size_t kMaxModelElements = static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(float);

// @throws TypeError (not a sequence of ints), InvalidArgument (empty, a size
// <= 0, a total past kMaxModelElements) naming the index.
std::vector<std::size_t> tensorSizesOf(const py::object& sizes) {
  if (py::isinstance<py::str>(sizes) || py::isinstance<py::bytes>(sizes) ||
      !py::isinstance<py::iterable>(sizes))
    throw py::type_error("tensor_sizes must be a sequence of ints, not " + typeName(sizes));
  std::vector<std::size_t> out;
  std::size_t total = 0;
  for (const py::handle s : py::reinterpret_borrow<py::iterable>(sizes)) {
    const std::string at = "tensor_sizes[" + std::to_string(out.size()) + "]";
    const py::int_ i = integerOf(s, at);
    if (PyObject_RichCompareBool(i.ptr(), py::int_(0).ptr(), Py_LE) == 1)
      throw InvalidArgument(at + " is " + py::str(static_cast<const py::object&>(i)).cast<std::string>() +
                            ": every tensor has one element at least");
    const std::uint64_t n = unsignedOf(i, at);
    if (n > kMaxModelElements - total)
      throw InvalidArgument("tensor_sizes add up to more than " + std::to_string(kMaxModelElements) +
                            " elements (at " + at + ")");
    total += n;
    out.push_back(static_cast<std::size_t>(n));
  }
  if (out.empty()) throw InvalidArgument("tensor_sizes is empty: a model has one tensor at least");
  return out;
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
  /// `params`, checked, kept as the agent's model (PyAgent::keepModel) once
  /// get() accepted this optimizer: a stale one is refused before the model
  /// held for the current one is swapped. @throws InvalidArgument as get().
  Array& keepModel(Array params) const;
};

// ---- the Agent --------------------------------------------------------------------

// Python's Agent: a gossamer::Session (the rank's Agent and the elastic
// protocol: its optimizer survives view changes, survive() redoes the
// caller's own collectives over the survivors) and its rendezvous.
class PyAgent {
 public:
  /// The rank's Session and its rendezvous. The agent holds them until
  /// close() or abort(), and every call that releases the GIL holds them
  /// too until it returns (hold(), WithoutGil): a close() from another
  /// thread (a watchdog's) cancels the waits of a call in flight, which
  /// raises there, but frees nothing under it; the last holder frees them.
  struct Live {
    std::unique_ptr<zmq::Rendezvous> rv;  // declared first: destroyed after the Session
    std::unique_ptr<Session> session;
  };

  PyAgent(const Config& config, int rank, const std::string& rendezvous, double storeTimeout)
      : records_(std::make_shared<RecordQueue>()), live_(std::make_shared<Live>()) {
    live_->rv = std::make_unique<zmq::Rendezvous>(rendezvous, rank, storeTimeout);
    try {
      live_->session = std::make_unique<Session>(config, rank, live_->rv->store(), builtins());
    } catch (...) {
      live_->rv->giveBack();  // a retry in this process meets the other ranks' same Agent
      throw;
    }
    // Records queue up here (no GIL needed on the threads that make them)
    // until Python takes them with Agent.metrics().
    live_->session->agent().metrics().subscribe([q = records_](const MetricsRecord& r) { q->push(r.json); });
  }
  /// An agent collected unclosed closes its Session without the GIL: the
  /// close may wait out transport.linger_seconds, and Python's other threads
  /// run meanwhile.
  ~PyAgent() {
    if (!live_) return;
    std::optional<py::gil_scoped_release> unlocked;
    if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) unlocked.emplace();
    live_.reset();
  }
  PyAgent(const PyAgent&) = delete;
  PyAgent& operator=(const PyAgent&) = delete;

  /// The agent's Live, for a call to hold while it runs. Called with the GIL.
  /// @throws InvalidArgument once the agent is closed.
  std::shared_ptr<Live> hold() const {
    if (!live_) throw InvalidArgument("the agent is closed");
    return live_;
  }
  /// Called with the GIL, for calls that keep it. @throws InvalidArgument once closed.
  Session& session() { return *hold()->session; }
  Agent& agent() { return session().agent(); }
  /// How many optimizers make_optimizer built (the last one is the agent's).
  std::uint64_t optimizerGeneration() const { return optimizerGeneration_; }
  std::uint64_t newOptimizerGeneration() { return ++optimizerGeneration_; }
  /// Takes the agent's Live out (null once closed): the agent is closed from
  /// here on, for every thread. Called with the GIL; the caller closes or
  /// aborts the Session without it.
  std::shared_ptr<Live> takeLive() { return std::move(live_); }

  /// A call that would destroy or replace what a call in flight on another
  /// thread uses (make_optimizer, recover) is refused while one runs.
  /// Called with the GIL. @throws InvalidArgument naming `call`.
  void notWhileBusy(const char* call) const {
    if (live_ && live_.use_count() > 1)
      throw InvalidArgument(std::string(call) +
                            "() while another call on this agent runs on another thread: an agent's calls "
                            "come from one thread (close() and abort() excepted)");
  }

  /// While the agent runs Python code of the caller's (survive's fn), a
  /// call from that code that would destroy or replace what the running C++
  /// frame uses (close, abort, make_optimizer, recover) is refused; another
  /// thread's close or abort is not (the frame holds the Live). Called with
  /// the GIL. @throws InvalidArgument naming `call` on the thread inside survive.
  void notInCallback(const char* call) const {
    if (std::find(callbackThreads_.begin(), callbackThreads_.end(), std::this_thread::get_id()) !=
        callbackThreads_.end())
      throw InvalidArgument(std::string(call) + "() inside survive(fn): call it after survive returns");
  }
  /// Counts a callback into the caller's Python code as running on this
  /// thread while it lives. Made and destroyed with the GIL.
  class Callback {
   public:
    explicit Callback(PyAgent& a) : a_(a) { a_.callbackThreads_.push_back(std::this_thread::get_id()); }
    ~Callback() {
      auto& t = a_.callbackThreads_;
      t.erase(std::find(t.begin(), t.end(), std::this_thread::get_id()));
    }
    Callback(const Callback&) = delete;
    Callback& operator=(const Callback&) = delete;

   private:
    PyAgent& a_;
  };
  bool closed() const { return live_ == nullptr; }
  /// The round of the next exchange(): 0 again once a new view is installed
  /// (every survivor starts the new view's exchanges at 0, whichever round
  /// each was at when the old one failed).
  std::uint64_t& exchangeRound() {
    const std::uint64_t view = live_->session->elastic() ? live_->session->view().number : 0;
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

  /// Keeps the model buffer given to Optimizer.step, mix_parameters or flush
  /// exported until the next of them: the Session's optimizer keeps its
  /// address, and a view change in a later call writes the survivors' model
  /// into it or sends from it, so the caller dropping (or resizing) it must
  /// not free it. Called with the GIL. @return the buffer kept.
  Array& keepModel(Array model) { return model_.emplace(std::move(model)); }

 private:
  std::shared_ptr<RecordQueue> records_;  // shared with the Agent's subscription
  std::optional<Array> model_;            // see keepModel (released with the GIL: after ~PyAgent's body)
  std::shared_ptr<Live> live_;            // null once closed (changed with the GIL held)
  std::uint64_t exchangeRound_ = 0;
  std::uint64_t exchangeView_ = 0;  // the view exchangeRound_ counts in
  std::uint64_t optimizerGeneration_ = 0;
  std::vector<std::thread::id> callbackThreads_;  // threads inside survive(fn) (changed with the GIL held)
};

// The blocking part of a call: releases the GIL while holding the call's
// agent's Live. Destroyed, it drops the Live first, still without the GIL
// (the last holder's drop closes the Session, which may wait out
// transport.linger_seconds), then takes the GIL back.
class WithoutGil {
 public:
  explicit WithoutGil(std::shared_ptr<PyAgent::Live> live) : live_(std::move(live)) {}
  WithoutGil(const WithoutGil&) = delete;
  WithoutGil& operator=(const WithoutGil&) = delete;
  ~WithoutGil() = default;
  /// The held Live (null when made from a closed agent's takeLive()).
  PyAgent::Live* live() const { return live_.get(); }
  /// Whether a call on another thread holds the Live too.
  bool shared() const { return live_.use_count() > 1; }

 private:
  py::gil_scoped_release release_;  // first: released before live_ is taken, taken back after it goes
  std::shared_ptr<PyAgent::Live> live_;
};

// Runs fn(the handle's optimizer) without the GIL, holding its agent (the
// checks that the optimizer is still the agent's run first, with the GIL).
template <typename F>
void withoutGil(const OptimizerHandle& h, F&& fn) {
  DistributedOptimizer& o = h.get();
  const WithoutGil call(h.agent->hold());
  fn(o);
}

Array& OptimizerHandle::keepModel(Array params) const {
  (void)get();
  return agent->keepModel(std::move(params));
}

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

void pyAllreduce(PyAgent& self, const py::object& data, const std::string& op,
                 const std::optional<std::string>& algorithm, const std::string& half) {
  Array a = checkedArray(data, "data", true, half);
  const ReduceOp rop = parseOp(op);
  auto live = self.hold();
  Communicator& comm = live->session->agent().communicator();
  const CollectiveOptions o = optionsWith(comm, algorithm);
  const WithoutGil call(std::move(live));
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

std::unique_ptr<PyWork> pyAllreduceAsync(PyAgent& self, const py::object& data, const std::string& op,
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

void pyBroadcast(PyAgent& self, const py::object& data, int root, const std::string& half) {
  Array a = checkedArray(data, "data", true, half);
  auto live = self.hold();
  Communicator& comm = live->session->agent().communicator();
  const int local = bindings::rootInView(live->session->view(), root);  // root: a global rank
  const WithoutGil call(std::move(live));
  a.visit([&](auto span) { comm.broadcast(span, local); });
}

// ---- exceptions ---------------------------------------------------------------------

// The Python classes, created in PYBIND11_MODULE (errors.hpp translates into them).
bindings::PythonErrors exc;

PyObject* newException(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("gossamer.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(type));
  return type;
}

void translate(std::exception_ptr p) { bindings::translateErrors(exc, p); }

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
// While fn runs, close(), abort(), make_optimizer() and recover() on this
// agent are refused (they would free or replace what Session::survive is
// using): PyAgent::Callback.
bool pySurvive(PyAgent& a, const py::function& fn) {
  auto live = a.hold();
  Session& session = *live->session;
  const PyAgent::Callback running(a);  // destroyed after `call`: with the GIL
  const WithoutGil call(std::move(live));
  return session.survive([&] {
    py::gil_scoped_acquire acquire;
    try {
      fn();
    } catch (py::error_already_set& e) {
      // .peer as this library sets it (a rank); anything else a user's own
      // raise put there names no rank.
      int peer = -1;
      if (e.value() && py::hasattr(e.value(), "peer")) {
        const py::object given = e.value().attr("peer");
        if (PyLong_Check(given.ptr()) && !PyBool_Check(given.ptr())) {
          int overflow = 0;
          const long v = PyLong_AsLongAndOverflow(given.ptr(), &overflow);
          if (overflow == 0 && v >= -1 && v <= std::numeric_limits<int>::max()) peer = static_cast<int>(v);
        }
      }
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
      "Agent.make_optimizer(tensor_sizes) built it (not constructed directly; C++: the Session's "
      "DistributedOptimizer). Its arrays are NumPy float32 arrays, or other objects with the buffer "
      "protocol, C-contiguous and writable, of exactly `size` elements (any shape); a CPU float32 torch "
      "tensor has no buffer protocol: pass tensor.detach().numpy() (the same memory). The params of step, "
      "mix_parameters and flush is the model: the agent keeps its address (a view change in a later call "
      "writes the survivors' model into it), so pass the same buffer to all three; the agent holds the last "
      "one (exported: an array.array cannot be resized meanwhile). Every method raises "
      "InvalidArgument once the agent is closed or aborted, or once a later make_optimizer replaced this "
      "optimizer (an agent keeps one).")
      .def_property_readonly(
          "name", [](const OptimizerHandle& h) { return h.get().name(); },
          "The algorithm's name (str), e.g. 'allreduce_sgd' or 'crossover_sgd', with its compressor's "
          "when one wraps it (DistributedOptimizer::name). Raises InvalidArgument as every method.")
      .def_property_readonly(
          "size", [](const OptimizerHandle& h) { return h.size; },
          "Elements of the flat parameter vector (int): sum(tensor_sizes) of make_optimizer; the length of "
          "every array passed to the methods.")
      .def_property_readonly(
          "steps", [](const OptimizerHandle& h) { return h.get().steps(); },
          "Steps completed (int): step() or mix_parameters() calls that counted "
          "(DistributedOptimizer::steps). With the membership service a view change may move it: a rank "
          "behind the survivors skips to "
          "their step. Raises InvalidArgument as every method.")
      .def_property_readonly(
          "has_communication_only_form",
          [](const OptimizerHandle& h) { return h.get().hasCommunicationOnlyForm(); },
          "Whether the algorithm splits into reduce_gradients() before, and mix_parameters() after, a "
          "local step made elsewhere (bool; gossamer.torch.DistributedOptimizer needs it; "
          "DistributedOptimizer::hasCommunicationOnlyForm). Raises InvalidArgument as every method.")
      .def(
          "step",
          [](OptimizerHandle& h, const py::object& params, const py::object& grads) {
            Array checked = float32Array(params, "params", h.size), g = float32Array(grads, "grads", h.size);
            Array& p = h.keepModel(std::move(checked));  // once both are valid
            withoutGil(h, [&](DistributedOptimizer& o) { o.step(p.as<float>(), g.as<const float>()); });
          },
          py::arg("params"), py::arg("grads"),
          "One training step (DistributedOptimizer::step): the C++ local SGD step and the algorithm's "
          "exchange. params, grads: float32 buffers (NumPy arrays) of `size` elements; params is updated in "
          "place, grads only read. Raises TypeError (not a buffer, not float32), ValueError (a length other "
          "than `size`, read-only, not contiguous), InvalidArgument as every method, PeerFailure, Expelled, "
          "TimeoutError.")
      .def(
          "reduce_gradients",
          [](OptimizerHandle& h, const py::object& grads) {
            Array g = float32Array(grads, "grads", h.size);
            withoutGil(h, [&](DistributedOptimizer& o) { o.reduceGradients(g.as<float>()); });
          },
          py::arg("grads"),
          "Communication-only form, before a local step made elsewhere "
          "(DistributedOptimizer::reduceGradients): averages `grads` (a float32 buffer of `size` elements) "
          "in place for allreduce-style algorithms; gossip algorithms leave it. Raises as step.")
      .def_property_readonly(
          "replicated_model", [](const OptimizerHandle& h) { return h.get().replicatedModel(); },
          "Whether every rank holds the same model after each step (bool: AllReduce-SGD, a compressor "
          "whose decoded average is the same everywhere; DistributedOptimizer::replicatedModel); after a "
          "view change a rank behind takes the survivors' model. Raises InvalidArgument as every method.")
      .def_property_readonly(
          "skips_local_step", [](const OptimizerHandle& h) { return h.get().skipsLocalStep(); },
          "True after a reduce_gradients() that leaves this step out (bool; "
          "DistributedOptimizer::skipsLocalStep): with the membership service a view change inside it found "
          "this rank behind the survivors (or rejoining); it takes their step count and, for a replicated "
          "model, their model. Make no local step then, and call mix_parameters(), which exchanges nothing. "
          "Raises InvalidArgument as every method.")
      .def(
          "mix_parameters",
          [](OptimizerHandle& h, const py::object& params) {
            Array& p = h.keepModel(float32Array(params, "params", h.size));
            withoutGil(h, [&](DistributedOptimizer& o) { o.mixParameters(p.as<float>()); });
          },
          py::arg("params"),
          "Communication-only form, after the local step (DistributedOptimizer::mixParameters): mixes "
          "`params` (a float32 buffer of `size` elements) in place with the peers' for gossip algorithms, "
          "and counts the step. Raises as step.")
      .def(
          "flush",
          [](OptimizerHandle& h, const py::object& params) {
            Array& p = h.keepModel(float32Array(params, "params", h.size));
            withoutGil(h, [&](DistributedOptimizer& o) { o.flush(p.as<float>()); });
          },
          py::arg("params"),
          "Completes an exchange still in flight (overlap mode) into `params` (a float32 buffer of `size` "
          "elements, in place); call before evaluating or saving the model (DistributedOptimizer::flush). "
          "Raises as step.")
      .def(
          "set_total_steps",
          [](OptimizerHandle& h, const py::object& totalSteps) {
            const std::uint64_t n = unsignedOf(totalSteps, "total_steps");
            h.get().setTotalSteps(n);
          },
          py::arg("total_steps"),
          "Announces the run's length in steps (int in [0, 2**64); A2SGD's final synchronisation; "
          "DistributedOptimizer::setTotalSteps). Raises TypeError (not an int, a bool), InvalidArgument "
          "(outside the range) and as every method.");
}

void defineAgentCollectives(py::class_<PyAgent>& cls) {
  py::class_<PyWork>(
      cls, "Work",
      "A non-blocking allreduce (Agent.allreduce_async; C++: gossamer::Work); dropping it waits "
      "for the allreduce.")
      .def(
          "wait",
          [](PyWork& w, std::optional<double> timeout) {
            if (timeout && std::isnan(*timeout))
              throw InvalidArgument("timeout is not a number (nan): give seconds >= 0, or None");
            py::gil_scoped_release release;
            if (timeout)
              w.work.wait(*timeout);
            else
              w.work.wait();
          },
          py::arg("timeout") = py::none(),
          "Blocks until the allreduce is done (Work::wait); raises its error (PeerFailure, TimeoutError), or "
          "TimeoutError after `timeout` seconds (float >= 0) if given; InvalidArgument for a negative or "
          "NaN timeout.")
      .def(
          "is_completed", [](const PyWork& w) { return w.work.test(); },
          "True once the allreduce has finished, successfully or not (Work::test). Never blocks.");
  cls.def("allreduce", &pyAllreduce, py::arg("data"), py::arg("op") = "average",
          py::arg("algorithm") = py::none(), py::arg("dtype") = "",
          "Reduces `data` over all ranks, in place (Communicator::allreduce). data: a C-contiguous, "
          "writable buffer of float32, float64 or float16 elements, any shape, or of 16-bit integers "
          "holding bfloat16 or float16 bits when `dtype` is 'bfloat16' or 'float16'; host memory only. "
          "op: 'average' (or 'mean'), 'sum', 'max', 'min'. algorithm: an allreduce_algorithms() name for "
          "this call (None: the config's). Raises TypeError (not a buffer, another element type), "
          "ValueError (read-only, not contiguous, unknown op, algorithm or dtype), InvalidArgument (the "
          "agent is closed), PeerFailure, ProtocolError, TimeoutError.")
      .def("allreduce_async", &pyAllreduceAsync, py::arg("data"), py::arg("op") = "average",
           py::arg("algorithm") = py::none(), py::arg("dtype") = "",
           "Starts allreduce(data, op, algorithm, dtype) on the communication thread and returns its Work at "
           "once (Communicator::iallreduce); `data` (host memory, kept alive by the Work) must not be read "
           "or written until the Work is done. Raises as allreduce for bad arguments, at the call; the "
           "reduction's own errors come from Work.wait().")
      .def("broadcast", &pyBroadcast, py::arg("data"), py::arg("root") = 0, py::arg("dtype") = "",
           "Copies rank `root`'s `data` into every member's of the view in force, in place "
           "(Communicator::broadcast). data, dtype: as allreduce; root: a global rank (as Agent.rank) that "
           "is a member of the view (view['members']). Raises as allreduce; ValueError for a root that is "
           "not a member.")
      .def(
          "barrier",
          [](PyAgent& a) {
            auto live = a.hold();
            Communicator& c = live->session->agent().communicator();
            const WithoutGil call(std::move(live));
            c.barrier();
          },
          "Returns once every rank has entered the barrier (Communicator::barrier). Raises InvalidArgument "
          "(closed), PeerFailure, TimeoutError.");
}

void defineAgentTraining(py::class_<PyAgent>& cls) {
  cls.def(
         "make_optimizer",
         [](PyAgent& a, const py::object& sizes) {
           a.notInCallback("make_optimizer");
           a.notWhileBusy("make_optimizer");
           const std::vector<std::size_t> tensorSizes = tensorSizesOf(sizes);
           std::size_t n = 0;
           for (auto s : tensorSizes) n += s;  // at most kMaxModelElements
           auto live = a.hold();
           Session& session = *live->session;
           const std::uint64_t generation = a.newOptimizerGeneration();
           const WithoutGil call(std::move(live));
           return OptimizerHandle{&session.makeOptimizer(tensorSizes), n, &a, generation};
         },
         py::arg("tensor_sizes"), py::keep_alive<0, 1>(),
         "Builds the configured algorithm (Session::makeOptimizer) for a flat float32 parameter vector made "
         "of tensors of `tensor_sizes` elements (a sequence of ints > 0, at most PTRDIFF_MAX / 4 in all) and "
         "returns its Optimizer; it replaces the agent's earlier one, whose Optimizer then raises. "
         "Collective for hierarchical groups. Raises TypeError (not a sequence of ints; bools refused), "
         "InvalidArgument (no sizes, a size <= 0, too large a total, named by index; the agent is closed; "
         "called inside survive(fn)), ConfigError, PeerFailure, TimeoutError.")
      .def(
          "exchange",
          [](PyAgent& a, const py::object& params) {
            Array p = float32Array(params, "params");
            auto live = a.hold();
            Agent& agent = live->session->agent();
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
            const WithoutGil call(std::move(live));
            exchange(p.as<float>(), round);
            ++round;  // a failed exchange takes no round: the next try repeats it
          },
          py::arg("params"),
          "One gossip exchange of `params` (a float32 buffer of the optimizer's size, in place) with the "
          "algorithm's peers, without a local step (DistributedOptimizer::modelExchange). Raises TypeError, "
          "ValueError (bad buffer), InvalidArgument (no optimizer, or one without a model exchange; a "
          "length mismatch), PeerFailure, TimeoutError.");
}

void defineAgentMembership(py::class_<PyAgent>& cls) {
  cls.def_property_readonly(
         "has_membership", [](PyAgent& a) { return a.session().elastic(); },
         "Whether the membership service is on (bool; membership.enabled; Session::elastic). Raises "
         "InvalidArgument once closed.")
      .def_property_readonly(
          "view",
          [](PyAgent& a) {
            const View v = a.agent().view();
            py::dict d;
            d["number"] = v.number;
            d["coordinator"] = v.coordinator;
            d["members"] = v.members;
            return d;
          },
          "The view in force (Agent::view): a dict of number (int, 0 for the first), coordinator (the rank "
          "that issued it, -1 for the first) and members (ranks, ascending). Raises InvalidArgument once "
          "closed.")
      .def(
          "recover",
          [](PyAgent& a) {
            a.notInCallback("recover");
            a.notWhileBusy("recover");
            auto live = a.hold();
            Session& session = *live->session;
            ViewChange c;
            {
              const WithoutGil call(std::move(live));
              c = session.recover();
            }
            return changeDict(c);
          },
          "After a PeerFailure in a collective of the caller's: agrees with the survivors on a view without "
          "the lost peers and rebuilds the communicator and optimizer over it (Session::recover). Returns a "
          "dict: number, members, lost, joined (ranks), resume_step, seconds (the agreement's duration). "
          "Raises InvalidArgument (membership off, closed, called inside survive(fn)), Expelled, "
          "TimeoutError, PeerFailure.")
      .def_property_readonly(
          "view_changes",
          [](PyAgent& a) {
            py::list out;
            for (const ViewChange& c : a.session().viewChanges()) out.append(changeDict(c));
            return out;
          },
          "The view changes so far, oldest first: dicts as recover() returns (Session::viewChanges). Raises "
          "InvalidArgument once closed.")
      .def(
          "survive", &pySurvive, py::arg("fn"),
          "Runs fn() (a callable, with the GIL) until it completes over a view (Session::survive): a "
          "PeerFailure (or a TimeoutError followed by a view change) inside it makes the survivors agree on "
          "a view without the lost peers and run fn again. Returns True once fn completed, False when a view "
          "change moved this rank past it. While fn runs, close(), abort(), make_optimizer() and recover() "
          "on this agent called from fn's thread raise InvalidArgument (\"close() inside survive(fn): call "
          "it after survive returns\"); another thread may close or abort it (survive then raises). Raises "
          "PeerFailure (membership off), Expelled, TimeoutError, InvalidArgument (closed), and whatever else "
          "fn raises.");
}

void defineAgentMetrics(py::class_<PyAgent>& cls) {
  cls.def(
         "stats",
         [](PyAgent& a) {
           const TransportStats s = a.agent().transport().stats();
           py::dict d;
           d["bytes_sent"] = s.bytesSent;
           d["bytes_received"] = s.bytesReceived;
           d["messages_sent"] = s.messagesSent;
           d["messages_received"] = s.messagesReceived;
           return d;
         },
         "This rank's transport counters (Transport::stats): a dict of bytes_sent, bytes_received (bytes), "
         "messages_sent, messages_received (ints). Raises InvalidArgument once closed.")
      .def(
          "take_metrics", [](PyAgent& a) { return a.records().take(); },
          "The metrics records made since the last call, oldest first, each one JSON object as a str "
          "(docs/metrics.md; Metrics::subscribe). At most 65,536 wait; older ones are dropped "
          "(metrics_dropped). Works after close too.")
      .def_property_readonly(
          "metrics_dropped",
          [](PyAgent& a) {
            std::lock_guard<std::mutex> lk(a.records().mu);
            return a.records().dropped;
          },
          "Records dropped because take_metrics() was not called often enough (int).")
      .def_property_readonly(
          "run_dir", [](PyAgent& a) { return a.agent().metrics().dir(); },
          "The run directory where this rank's rank-R.jsonl is written (str; \"\" when none; Metrics::dir). "
          "Raises InvalidArgument once closed.")
      .def(
          "emit_metrics",
          [](PyAgent& a, const std::string& kind, const py::object& step,
             const std::vector<std::pair<std::string, std::string>>& fields) {
            const std::uint64_t s = unsignedOf(step, "step");
            MetricFields f;
            for (const auto& [name, text] : fields) {
              gossamer::checkMetricFieldName(name, false, "emit_metrics");
              f.emplace_back(name, JsonText{text});
            }
            auto live = a.hold();
            Metrics& m = live->session->agent().metrics();
            const WithoutGil call(std::move(live));
            m.emit(kind, s, f);
          },
          py::arg("kind"), py::arg("step"), py::arg("fields"),
          "Appends a record of the caller's (Metrics::emit): kind (a non-empty str), step (int in [0, "
          "2**64)), fields: (name, JSON text) pairs. Raises TypeError (step not an int), InvalidArgument (an "
          "empty kind, a step outside the range, a field named kind, rank, time or step, malformed JSON, "
          "closed).")
      .def(
          "note_metric",
          [](PyAgent& a, const std::string& name, double value) {
            gossamer::checkMetricFieldName(name, true, "note_metric");
            auto live = a.hold();
            Metrics& m = live->session->agent().metrics();
            const WithoutGil call(std::move(live));
            m.note(name, value);
          },
          py::arg("name"), py::arg("value"),
          "Adds `value` (float) to the mean the next step record carries as `name` (Metrics::note). Raises "
          "InvalidArgument for a name that a record has already (kind, rank, time, step, steps, compute_s, "
          "communication_s, waiting_s, sent_bytes, received_bytes, push_sum_weight, view), or once closed.")
      .def(
          "close",
          [](PyAgent& a) {
            a.notInCallback("close");
            const WithoutGil call(a.takeLive());  // closed from here on, also if the close raises
            if (call.live() == nullptr) return;
            // A call in flight on another thread holds the Session too: only
            // its transport is closed now, which cancels that call's waits;
            // the Session closes when the last holder lets it go.
            if (call.shared())
              call.live()->session->agent().transport().close();
            else
              call.live()->session->close();
          },
          "Delivers what is queued (within transport.linger_seconds), says goodbye and releases the "
          "transport (Session::close); destroys the optimizer. Idempotent. May be called from another "
          "thread while a call runs (a watchdog's): that call's waits are cancelled and it raises; the "
          "agent is freed once it returns. Raises InvalidArgument inside survive(fn), and the close's own "
          "error (the agent is closed anyway).")
      .def(
          "abort",
          [](PyAgent& a) {
            a.notInCallback("abort");
            const WithoutGil call(a.takeLive());
            if (call.live() == nullptr) return;
            if (call.shared())  // as close()
              call.live()->session->agent().transport().abort();
            else
              call.live()->session->abort();
          },
          "Closes without delivering what is still queued (Session::abort); destroys the optimizer. "
          "Idempotent; may be called from another thread as close(). Raises InvalidArgument inside "
          "survive(fn).");
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "Gossamer's C++ core (use the 'gossamer' package, which wraps it).";
  defineExceptions(m);
  defineFunctions(m);
  defineOptimizer(m);
  py::class_<PyAgent> cls(
      m, "Agent",
      "One rank's agent (C++: gossamer::Session over a zmq::Rendezvous store and every built-in "
      "component): its transport, collectives, optimizer, membership and metrics. Use gossamer.Agent, "
      "which wraps it. One thread issues an agent's calls, but close() and abort() may come from another "
      "(make_optimizer and recover refuse to run beside a call on another thread). Every member raises "
      "InvalidArgument once the agent is closed, unless it says otherwise.");
  cls.def(py::init([](const std::string& source, bool isText, const std::vector<std::string>& overrides,
                      int rank, const std::string& rendezvous) {
            if (rendezvous.find('\0') != std::string::npos)
              throw InvalidArgument("rendezvous contains a NUL byte");
            const Config c = loadConfig(source, isText, overrides);
            if (rank < 0 || rank >= c.worldSize())
              throw InvalidArgument("rank " + std::to_string(rank) + " outside [0, " +
                                    std::to_string(c.worldSize()) + ")");
            py::gil_scoped_release release;
            return std::make_unique<PyAgent>(c, rank, rendezvous, c.get<double>("transport.timeout_seconds"));
          }),
          py::arg("source"), py::arg("is_text"), py::arg("overrides"), py::arg("rank"), py::arg("rendezvous"),
          "Joins the job (Session::Session): source is a YAML file path, or YAML text when is_text; "
          "overrides \"key=value\" strs; rank in [0, world_size); rendezvous \"tcp://HOST:PORT\" or a "
          "directory every rank sees. Blocks until every rank has joined (transport.timeout_seconds). Raises "
          "ConfigError, InvalidArgument (rank outside the range, a NUL in rendezvous), TimeoutError, Error.")
      .def_property_readonly(
          "rank", [](PyAgent& a) { return a.agent().rank(); }, "This rank (int, in [0, world_size)).")
      .def_property_readonly(
          "world_size", [](PyAgent& a) { return a.agent().worldSize(); }, "Ranks in the job (int).")
      .def_property_readonly(
          "algorithm", [](PyAgent& a) { return a.agent().config().get<std::string>("algorithm.name"); },
          "The configured algorithm.name (str).")
      .def_property_readonly(
          "transport_kind", [](PyAgent& a) { return a.agent().config().get<std::string>("transport.kind"); },
          "The configured transport.kind (str).")
      .def_property_readonly(
          "timeout_seconds",
          [](PyAgent& a) { return a.agent().config().get<double>("transport.timeout_seconds"); },
          "The bound on every network wait (float, seconds; transport.timeout_seconds).")
      .def_property_readonly("closed", &PyAgent::closed,
                             "Whether close() or abort() was called (bool; never raises).");
  defineAgentCollectives(cls);
  defineAgentTraining(cls);
  defineAgentMembership(cls);
  defineAgentMetrics(cls);
}
