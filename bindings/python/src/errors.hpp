// gossamer's C++ errors as the Python classes that gossamer._core defines
// (gossamer.PeerFailure, gossamer.TimeoutError, ...), message and attributes
// kept: the one translation both extension modules register.
//
// pybind11 runs the exception translators registered in the "internals" of
// the module whose binding the error leaves, and modules share internals only
// when built with the same pybind11 version, compiler and ABI. gossamer._core
// creates the classes and registers the translation in its own internals;
// gossamer._c10d, whose process group derives from torch's c10d Backend and
// so shares torch's internals, registers the same translation there. Without
// that, an error that leaves through one of torch's bindings (Work.wait(), a
// future's wait(), init_process_group) arrived as a plain RuntimeError
// wherever _core's pybind11 is not torch's: on the GPU machine of
// scripts/device-check.sh (pybind11 3.1.0, torch 2.11; docs/python.md).
#pragma once

#include <pybind11/pybind11.h>

#include <exception>
#include <initializer_list>
#include <string>
#include <utility>

#include "gossamer/errors.hpp"
#include "gossamer/membership.hpp"  // ViewChanged, Expelled

namespace gossamer::bindings {

/// The Python classes of gossamer's errors (new references, held for the
/// life of the process). Filled by gossamer._core, which creates them, and
/// by pythonErrorsOf() in another module.
struct PythonErrors {
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

/// Text from C++ (a message, a config file's name or key) as a Python str:
/// bytes that are not UTF-8 (a YAML value, a path) become \xNN escapes
/// instead of a UnicodeDecodeError in place of the error being raised.
/// Throws pybind11::error_already_set if Python cannot make the str.
inline pybind11::str textOf(const std::string& s) {
  PyObject* str = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "backslashreplace");
  if (str == nullptr) throw pybind11::error_already_set();
  return pybind11::reinterpret_steal<pybind11::str>(str);
}

/// Sets the Python error `type`(e.what()) with the attributes `attrs`
/// (needs the GIL). If making the instance fails, that failure is the error set.
inline void raiseAs(PyObject* type, const std::exception& e,
                    std::initializer_list<std::pair<const char*, pybind11::object>> attrs) {
  auto instance =
      pybind11::reinterpret_steal<pybind11::object>(PyObject_CallOneArg(type, textOf(e.what()).ptr()));
  if (!instance) return;  // the call set a Python error already
  for (const auto& [k, v] : attrs) instance.attr(k) = v;
  PyErr_SetObject(type, instance.ptr());
}

/// A pybind11 exception translator's body: sets the Python error for a
/// gossamer::Error in `p` (ConfigError's .file/.line/.key, ProtocolError's
/// .peer/.offset, PeerFailure's .peer, ...); rethrows anything else, for the
/// next translator.
inline void translateErrors(const PythonErrors& exc, std::exception_ptr p) {
  namespace py = pybind11;
  try {
    if (p) std::rethrow_exception(p);
  } catch (const ConfigError& e) {
    raiseAs(exc.config, e,
            {{"file", textOf(e.file())}, {"line", py::int_(e.line())}, {"key", textOf(e.key())}});
  } catch (const ProtocolError& e) {
    raiseAs(exc.protocol, e, {{"peer", py::int_(e.peer())}, {"offset", py::int_(e.offset())}});
  } catch (const Expelled& e) {
    raiseAs(exc.expelled, e, {{"peer", py::int_(e.peer())}});
  } catch (const ViewChanged& e) {
    raiseAs(exc.viewChanged, e, {{"peer", py::int_(e.peer())}});
  } catch (const PeerFailure& e) {
    raiseAs(exc.peerFailure, e, {{"peer", py::int_(e.peer())}});
  } catch (const TimeoutError& e) {
    raiseAs(exc.timeout, e, {});
  } catch (const Cancelled& e) {
    raiseAs(exc.cancelled, e, {});
  } catch (const InternalError& e) {
    raiseAs(exc.internal, e, {});
  } catch (const InvalidArgument& e) {
    raiseAs(exc.invalidArgument, e, {});
  } catch (const Error& e) {
    raiseAs(exc.error, e, {});
  }
}

/// The classes gossamer._core defines, looked up in the imported module
/// `core` (new references, never released). Throws
/// pybind11::error_already_set (AttributeError) if one is missing.
inline PythonErrors pythonErrorsOf(const pybind11::module_& core) {
  const auto get = [&](const char* name) {
    const pybind11::object type = core.attr(name);
    return type.inc_ref().ptr();
  };
  PythonErrors exc;
  exc.error = get("Error");
  exc.invalidArgument = get("InvalidArgument");
  exc.internal = get("InternalError");
  exc.config = get("ConfigError");
  exc.protocol = get("ProtocolError");
  exc.timeout = get("TimeoutError");
  exc.peerFailure = get("PeerFailure");
  exc.viewChanged = get("ViewChanged");
  exc.expelled = get("Expelled");
  exc.cancelled = get("Cancelled");
  return exc;
}

}  // namespace gossamer::bindings
