// gossamer._c10d: the Python face of ProcessGroupGossamer (process_group.hpp).
// gossamer.torch imports it and registers its constructor as the c10d
// backend "gossamer" (torch.distributed.Backend.register_backend).
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <string>
#include <vector>

#include "../../../common/builtins.hpp"
#include "../errors.hpp"
#include "process_group.hpp"

namespace py = pybind11;

namespace {
// gossamer._core's error classes: this module registers their translation
// with torch's pybind11 internals, which _core may not share (errors.hpp).
gossamer::bindings::PythonErrors errors;
}  // namespace

PYBIND11_MODULE(_c10d, m) {
  m.doc() =
      "Gossamer's torch.distributed backend (import gossamer.torch, which registers it as \"gossamer\").";
  // c10d's ProcessGroup and Store types, which these derive from and take.
  py::module_::import("torch.distributed");
  errors = gossamer::bindings::pythonErrorsOf(py::module_::import("gossamer._core"));
  py::register_exception_translator(
      [](std::exception_ptr p) { gossamer::bindings::translateErrors(errors, p); });
  using gossamer::c10d_backend::ProcessGroupGossamer;
  py::class_<ProcessGroupGossamer, gossamer::c10d_backend::BackendBase,
             c10::intrusive_ptr<ProcessGroupGossamer>>(
      m, "ProcessGroupGossamer",
      "torch.distributed process group over a Gossamer transport (CPU tensors, or CUDA ones staged\n"
      "through host memory). Reductions take float32, float64, float16, bfloat16, int32 and int64\n"
      "(ops SUM, AVG, PRODUCT, MIN, MAX); broadcast, all_gather, gather, scatter, all_to_all and\n"
      "send/recv take any dense dtype (uint8, bool, complex64, ...), moved as its bytes.")
      .def(py::init([](const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                       const std::string& source, bool isText, std::vector<std::string> overrides,
                       double timeoutSeconds, const std::string& storeHost) {
             // Before anything uses them: a None store would be dereferenced
             // by the rendezvous, and the rank and size shape the config.
             if (!store.defined())
               throw py::value_error("gossamer: store is None: pass the c10d Store of the group");
             if (size < 1)
               throw py::value_error("gossamer: size " + std::to_string(size) + " is not positive");
             if (rank < 0 || rank >= size)
               throw py::value_error("gossamer: rank " + std::to_string(rank) + " outside [0, " +
                                     std::to_string(size) + ")");
             overrides.push_back("world_size=" + std::to_string(size));
             const gossamer::Config config = gossamer::bindings::loadConfig(source, isText, overrides);
             py::gil_scoped_release release;  // the rendezvous waits for the peers
             return c10::make_intrusive<ProcessGroupGossamer>(
                 store, rank, size, config, gossamer::bindings::builtins(), timeoutSeconds, storeHost);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("source"), py::arg("is_text"),
           py::arg("overrides"), py::arg("timeout_seconds"), py::arg("store_host") = "",
           "Joins the group through the c10d `store`: `source` is the Gossamer config (YAML text if\n"
           "`is_text`, else a file path), `overrides` \"key=value\" strings; `timeout_seconds` bounds\n"
           "each collective's waits (seconds, > 0); `store_host` (MASTER_ADDR) is what\n"
           "`transport.host: auto` faces. `rank` is in [0, `size`), `size` >= 1. Raises ValueError\n"
           "for a None store, a size below 1 or a rank outside [0, size) (before anything else);\n"
           "gossamer's errors as their gossamer classes (a peer that never arrives: gossamer.TimeoutError\n"
           "naming it).\n"
           "(C++: ProcessGroupGossamer::ProcessGroupGossamer.)")
      .def_property_readonly("transport", &ProcessGroupGossamer::transportName,
                             "The transport's kind (\"zmq\", \"socket\", ...).");
}
