// Stacks as a person reads them: whose code each frame is, runs of
// framework frames folded, and call-site labels through Python frames.
#include <gtest/gtest.h>

#include "analyze/site_labels.h"
#include "analyze/stack_folding.h"

namespace cumemtrace::analyzer::detail {
namespace {

const std::string kFoldArrow = " \xE2\x86\x90 ";

OwnedFrame native(std::string fn, std::string module = "/opt/app/train", std::uint64_t off = 0x10) {
  OwnedFrame f;
  if (!fn.empty()) f.fn = std::move(fn);
  f.module = std::move(module);
  f.off = off;
  f.ip = 0x400000 + off;
  return f;
}

OwnedFrame py(std::string fn, std::string file, std::optional<std::uint64_t> line) {
  OwnedFrame f;
  f.py = true;
  f.fn = std::move(fn);
  f.file = std::move(file);
  f.line = line;
  return f;
}

std::vector<std::string> folded_labels_of(const std::vector<std::vector<OwnedFrame>>& stacks) {
  std::vector<const std::vector<OwnedFrame>*> pointers;
  for (const auto& s : stacks) pointers.push_back(&s);
  return label_call_sites(pointers);
}

TEST(StackFolding, FramesBelongToTheirLibraryByObjectFileElseByName) {
  EXPECT_EQ(frame_owner(native("", "/usr/lib/libtorch_cuda.so")), FrameOwner::libtorch);
  EXPECT_EQ(frame_owner(native("", "/x/libc10_cuda.so")), FrameOwner::libtorch);
  EXPECT_EQ(frame_owner(native("f", "/usr/lib/libpython3.12.so.1.0")), FrameOwner::cpython);
  EXPECT_EQ(frame_owner(native("f", "/usr/bin/python3.12")), FrameOwner::cpython);
  EXPECT_EQ(frame_owner(native("ffi_call", "/usr/lib/x86_64-linux-gnu/libffi.so.8")), FrameOwner::libffi);
  EXPECT_EQ(frame_owner(native("", "/usr/local/cuda/lib64/libcudart.so.13")), FrameOwner::cuda);
  EXPECT_EQ(frame_owner(native("", "/lib/x86_64-linux-gnu/libc.so.6")), FrameOwner::libc);
  // Imported snapshots name no object file: the name says.
  EXPECT_EQ(frame_owner(false, "at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>)", ""),
            FrameOwner::libtorch);
  EXPECT_EQ(frame_owner(false, "c10::impl::wrap_kernel_functor_unboxed_<X>::call(c10::OperatorKernel*)", ""),
            FrameOwner::libtorch);
  EXPECT_EQ(frame_owner(false, "torch::autograd::THPVariable_zeros_like(_object*, _object*, _object*)", ""),
            FrameOwner::libtorch);
  for (const char* name : {"_PyEval_EvalFrameDefault", "_PyObject_MakeTpCall", "PyObject_Call", "Py_RunMain",
                           "method_vectorcall_O", "cfunction_call", "slot_tp_call", "pymain_main",
                           "run_mod.llvm.9196888086361497952"}) {
    EXPECT_EQ(frame_owner(false, name, ""), FrameOwner::cpython) << name;
  }
  EXPECT_EQ(frame_owner(false, "__libc_start_main", ""), FrameOwner::libc);
  EXPECT_EQ(frame_owner(false, "_start", ""), FrameOwner::libc);
  // The program's own.
  for (const char* name : {"main", "train_step(Model&)", "Python_helper", "Pyramid::build()", "pybind_me", "run"}) {
    EXPECT_EQ(frame_owner(false, name, "/opt/app/train"), FrameOwner::user) << name;
  }
  // A Python frame is the user's, whatever its name.
  EXPECT_EQ(frame_owner(true, "_PyEval_EvalFrameDefault", ""), FrameOwner::user);
  EXPECT_EQ(frame_owner(py("at::x", "/a/b.py", 1)), FrameOwner::user);
}

TEST(StackFolding, RunsOfTwoOrMoreFrameworkFramesFoldTheInnermostFrameAlwaysShows) {
  using O = FrameOwner;
  const std::vector<O> owners = {O::libtorch, O::libtorch, O::libtorch, O::cpython, O::user,
                                 O::cpython,  O::user,     O::cpython,  O::libffi,  O::libc};
  const std::vector<StackLine> lines = fold_stack(owners);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_FALSE(lines[0].folded);  // the innermost frame, though libtorch's
  EXPECT_EQ(lines[0].first, 0u);
  EXPECT_TRUE(lines[1].folded);
  EXPECT_EQ(lines[1].first, 1u);
  EXPECT_EQ(lines[1].count, 3u);
  EXPECT_EQ(folded_text(lines[1]), "\xE2\x80\xA6 3 frames in libtorch, CPython");
  EXPECT_FALSE(lines[2].folded);
  EXPECT_EQ(lines[2].first, 4u);
  EXPECT_FALSE(lines[3].folded) << "one framework frame takes a line either way";
  EXPECT_EQ(lines[3].first, 5u);
  EXPECT_EQ(lines[4].first, 6u);
  EXPECT_TRUE(lines[5].folded);
  EXPECT_EQ(folded_text(lines[5]), "\xE2\x80\xA6 3 frames in CPython, libffi, libc");
  EXPECT_TRUE(fold_stack({}).empty());
}

TEST(StackFolding, OnlyLongNamesAreShortened) {
  EXPECT_EQ(readable_function_name("train_step(Model&, Batch const&)"), "train_step(Model&, Batch const&)");
  const std::string long_name =
      "at::TensorBase at::detail::_empty_strided_generic<c10::ArrayRef<long> >(c10::ArrayRef<long>, "
      "c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType)";
  EXPECT_EQ(readable_function_name(long_name), "at::detail::_empty_strided_generic<\xE2\x80\xA6>");
}

TEST(PythonLabels, APythonCallSiteReadsLikeANativeOne) {
  // Two Python lines calling one native helper, through the interpreter.
  const std::vector<std::vector<OwnedFrame>> stacks = {
      {native("device_alloc(unsigned long)"), native("_PyEval_EvalFrameDefault", "/usr/lib/libpython3.12.so", 0x20),
       py("Trainer.train_step", "/work/train.py", 42), py("main", "/work/train.py", 80)},
      {native("device_alloc(unsigned long)"), native("_PyEval_EvalFrameDefault", "/usr/lib/libpython3.12.so", 0x20),
       py("Trainer.evaluate", "/work/train.py", std::nullopt), py("main", "/work/train.py", 81)},
  };
  const std::vector<std::string> labels = folded_labels_of(stacks);
  EXPECT_EQ(labels[0], "device_alloc" + kFoldArrow + "Trainer.train_step (train.py:42)");
  EXPECT_EQ(labels[1], "device_alloc" + kFoldArrow + "Trainer.evaluate (train.py)") << "a null line: the file alone";
}

TEST(PythonLabels, WhereStacksPartInsideTheInterpreterTheProgramsCallerNamesTheSite) {
  // CPython's loop at two addresses, then the program's frames: the label
  // skips the interpreter's frame for the first frame of the program.
  const std::vector<std::vector<OwnedFrame>> stacks = {
      {native("device_alloc(unsigned long)"), native("_PyEval_EvalFrameDefault", "/usr/lib/libpython3.12.so", 0x20),
       native("_PyEval_EvalFrameDefault", "/usr/lib/libpython3.12.so", 0x30), py("load", "/work/data.py", 7)},
      {native("device_alloc(unsigned long)"), native("_PyEval_EvalFrameDefault", "/usr/lib/libpython3.12.so", 0x24),
       native("_PyEval_EvalFrameDefault", "/usr/lib/libpython3.12.so", 0x30), py("save", "/work/data.py", 9)},
  };
  const std::vector<std::string> labels = folded_labels_of(stacks);
  EXPECT_EQ(labels[0], "device_alloc" + kFoldArrow + "load (data.py:7)");
  EXPECT_EQ(labels[1], "device_alloc" + kFoldArrow + "save (data.py:9)");
}

TEST(PythonLabels, AStackThatEntersNativeCodeThroughCtypesStartsAtItsInnermostPythonFrame) {
  // What a ctypes call records: libffi (unnamed), ctypes' C code and
  // CPython's call machinery, then the script. The label starts with the
  // Python frame the program asked from, not with libffi's address.
  auto ctypes_path = [](std::uint64_t ffi_off) {
    return std::vector<OwnedFrame>{native("", "/lib/x86_64-linux-gnu/libffi.so.8", ffi_off),
                                   native("ffi_call", "/lib/x86_64-linux-gnu/libffi.so.8", 0x30),
                                   native("_PyObject_MakeTpCall", "/usr/bin/python3.11", 0x40)};
  };
  std::vector<std::vector<OwnedFrame>> stacks = {ctypes_path(0x6f7a), ctypes_path(0x6f7a)};
  stacks[0].push_back(py("device_alloc", "/work/train.py", 21));
  stacks[0].push_back(py("Trainer.train_step", "/work/train.py", 42));
  stacks[1].push_back(py("device_alloc", "/work/train.py", 21));
  stacks[1].push_back(py("load_weights", "/work/train.py", 33));
  const std::vector<std::string> labels = folded_labels_of(stacks);
  EXPECT_EQ(labels[0], "device_alloc (train.py:21)" + kFoldArrow + "Trainer.train_step (train.py:42)");
  EXPECT_EQ(labels[1], "device_alloc (train.py:21)" + kFoldArrow + "load_weights (train.py:33)");
  // A native program's innermost frame is its own: the label starts there.
  const std::vector<std::vector<OwnedFrame>> native_stacks = {
      {native("device_alloc(unsigned long)"), native("load_weights()", "/opt/app/train", 0x50)},
      {native("device_alloc(unsigned long)"), native("train_step()", "/opt/app/train", 0x60)}};
  EXPECT_EQ(folded_labels_of(native_stacks)[0], "device_alloc" + kFoldArrow + "load_weights");
}

}  // namespace
}  // namespace cumemtrace::analyzer::detail
