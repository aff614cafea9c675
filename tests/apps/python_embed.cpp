// A C++ program that embeds CPython (linked against libpython, as an
// inference server with Python plugins is): it allocates device memory
// itself before the interpreter starts, then runs a Python plugin whose
// functions call back into the program's own extension module, which
// allocates. The plugin's Python frames must stand between the module's
// native frame and the program's own (native → Python → native).
//
//   python_embed      prints "native PTR" and "plugin PTR" lines
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

namespace {

// Sizes the test finds the events by.
constexpr std::size_t kNativeBytes = 3 << 20;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "python_embed: %s failed\n", what);
  std::exit(3);
}

// embedded.device_alloc(size) -> int: the program's own allocator, which a
// plugin calls. noinline: it keeps its frame in the stack.
__attribute__((noinline)) PyObject* device_alloc(PyObject*, PyObject* args) {
  unsigned long long size = 0;
  if (!PyArg_ParseTuple(args, "K", &size)) return nullptr;
  void* p = nullptr;
  if (cudaMalloc(&p, size) != cudaSuccess) fail("cudaMalloc from the plugin");
  std::printf("plugin %p\n", p);
  return PyLong_FromVoidPtr(p);
}

PyMethodDef g_methods[] = {{"device_alloc", device_alloc, METH_VARARGS, "cudaMalloc(size) -> pointer"},
                           {nullptr, nullptr, 0, nullptr}};
PyModuleDef g_module = {PyModuleDef_HEAD_INIT, "embedded", nullptr, -1, g_methods,
                        nullptr, nullptr, nullptr, nullptr};

PyObject* init_embedded() { return PyModule_Create(&g_module); }

// The plugin, compiled under the file name "plugin.py": run_plugin (line 6)
// calls load (line 3), which calls the program back.
constexpr const char* kPlugin =
    "import embedded\n"
    "def load(size):\n"
    "    return embedded.device_alloc(size)\n"
    "\n"
    "def run_plugin():\n"
    "    return [load(1048576 + i) for i in range(2)]\n"
    "\n"
    "kept = run_plugin()\n";

__attribute__((noinline)) void allocate_natively() {
  void* p = nullptr;
  if (cudaMalloc(&p, kNativeBytes) != cudaSuccess) fail("cudaMalloc before Python");
  std::printf("native %p\n", p);
}

__attribute__((noinline)) void run_python() {
  if (PyImport_AppendInittab("embedded", &init_embedded) != 0) fail("PyImport_AppendInittab");
  Py_Initialize();
  PyObject* code = Py_CompileString(kPlugin, "plugin.py", Py_file_input);
  if (code == nullptr) fail("Py_CompileString");
  PyObject* globals = PyDict_New();
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  PyObject* result = PyEval_EvalCode(code, globals, globals);
  if (result == nullptr) {
    PyErr_Print();
    fail("the plugin");
  }
  Py_DECREF(result);
  Py_DECREF(globals);
  Py_DECREF(code);
  if (Py_FinalizeEx() != 0) fail("Py_FinalizeEx");
}

}  // namespace

int main() {
  allocate_natively();  // the interpreter is linked in but not initialized yet
  run_python();
  return 0;
}
