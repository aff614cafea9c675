// Call-site labels: short function names, labels that tell apart sites
// allocated through one helper, and uniqueness on random stacks.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "event_feeder.h"
#include "analyze/site_labels.h"

namespace cumemtrace::analyzer::detail {
namespace {

const std::string kArrow = " \xE2\x86\x90 ";

OwnedFrame named(std::string fn, std::uint64_t off = 0x10, std::string module = "/opt/app/train") {
  OwnedFrame f;
  f.fn = std::move(fn);
  f.module = std::move(module);
  f.off = off;
  f.ip = 0x400000 + off;
  return f;
}

OwnedFrame python(std::string fn, std::string file, std::uint64_t line) {
  OwnedFrame f;
  f.fn = std::move(fn);
  f.file = std::move(file);
  f.line = line;
  return f;
}

std::vector<std::string> labels_of(const std::vector<std::vector<OwnedFrame>>& stacks,
                                   const std::vector<std::string>& tags = {}) {
  std::vector<const std::vector<OwnedFrame>*> pointers;
  for (const auto& s : stacks) pointers.push_back(&s);
  return label_call_sites(pointers, tags);
}

TEST(ShortFunctionName, DropsWhatAPersonDoesNotScanFor) {
  EXPECT_EQ(short_function_name("(anonymous namespace)::device_alloc(unsigned long)"), "device_alloc");
  EXPECT_EQ(short_function_name("at::TensorBase at::detail::_empty_strided_generic<c10::ArrayRef<long> >("
                                "c10::ArrayRef<long>, c10::ArrayRef<long>, c10::Allocator*)"),
            "at::detail::_empty_strided_generic<\xE2\x80\xA6>");
  EXPECT_EQ(short_function_name("Model::forward(Tensor const&) const &"), "Model::forward");
  EXPECT_EQ(short_function_name("train_step(Model&) [clone .isra.0]"), "train_step");
  EXPECT_EQ(short_function_name("std::vector<int, std::allocator<int> > make(int)"), "make");
  EXPECT_EQ(short_function_name("std::function<void (int)>::operator()(int) const"),
            "std::function<\xE2\x80\xA6>::operator()");
  EXPECT_EQ(short_function_name("bool Key::operator<(Key const&) const"), "Key::operator<");
  EXPECT_EQ(short_function_name("operator new(unsigned long)"), "operator new");
  EXPECT_EQ(short_function_name("Flag::operator bool() const"), "Flag::operator bool");
  EXPECT_EQ(short_function_name("at::native::attention(at::Tensor const&)::{lambda(auto:1, auto:2)#1}::"
                                "operator()<Kernel<float, 64>, void (*)(int)>(auto:1, auto:2) const"),
            "at::native::attention::{lambda#1}::operator()<\xE2\x80\xA6>");
  // Python and C names stay as they are.
  EXPECT_EQ(short_function_name("<module>"), "<module>");
  EXPECT_EQ(short_function_name("forward"), "forward");
  EXPECT_EQ(short_function_name("main"), "main");
  // What it cannot parse it leaves alone.
  EXPECT_EQ(short_function_name("(broken"), "(broken");
  EXPECT_EQ(short_function_name(")"), ")");
}

TEST(SiteLabels, SitesThroughOneHelperAreNamedByTheirCallers) {
  const OwnedFrame helper = named("(anonymous namespace)::device_alloc(unsigned long)", 0x18ae);
  const OwnedFrame start = named("__libc_start_main", 0x27305, "/lib/libc.so.6");
  const std::vector<std::vector<OwnedFrame>> stacks{
      {helper, named("load_weights()", 0x1728), named("main", 0x132b), start},
      {helper, named("forward(unsigned long)", 0x1888), named("main", 0x1232), start},
      {helper, named("keep_loss(std::vector<void*>&)", 0x151b), named("main", 0x1242), start},
  };
  EXPECT_EQ(labels_of(stacks), (std::vector<std::string>{"device_alloc" + kArrow + "load_weights",
                                                          "device_alloc" + kArrow + "forward",
                                                          "device_alloc" + kArrow + "keep_loss"}));
}

TEST(SiteLabels, OneCallerAtTwoPlacesShowsWhere) {
  const OwnedFrame helper = named("device_alloc(unsigned long)", 0x18ae);
  const std::vector<std::vector<OwnedFrame>> stacks{
      {helper, named("main", 0x1211)},
      {helper, named("main", 0x13fa)},
  };
  EXPECT_EQ(labels_of(stacks), (std::vector<std::string>{"device_alloc" + kArrow + "main (train+0x1211)",
                                                          "device_alloc" + kArrow + "main (train+0x13fa)"}));
  // Two calls straight from one function: the innermost frame decides.
  const std::vector<std::vector<OwnedFrame>> direct{{named("main", 0x20)}, {named("main", 0x40)}};
  EXPECT_EQ(labels_of(direct), (std::vector<std::string>{"main (train+0x20)", "main (train+0x40)"}));
}

TEST(SiteLabels, SourceLinesAreShownWhereKnown) {
  const OwnedFrame empty = named("at::detail::empty_cuda(c10::ArrayRef<long>)", 0, "");
  const std::vector<std::vector<OwnedFrame>> stacks{
      {empty, python("step", "/home/u/optimizers.py", 82), python("train", "/home/u/run.py", 10)},
      {empty, python("step", "/home/u/optimizers.py", 84), python("train", "/home/u/run.py", 10)},
      {named("at::cuda::getNewWorkspace()", 0, "")},
  };
  EXPECT_EQ(labels_of(stacks),
            (std::vector<std::string>{"at::detail::empty_cuda" + kArrow + "step (optimizers.py:82)",
                                      "at::detail::empty_cuda" + kArrow + "step (optimizers.py:84)",
                                      "at::cuda::getNewWorkspace"}));
}

TEST(SiteLabels, LayerCodeCalledFromSeveralLayersKeepsBothFrames) {
  // mul and add in one layer's code, the layer called from two places: the
  // deciding frame alone (the layer's caller) would read alike for mul and add.
  const OwnedFrame empty = python("empty", "t.py", 1);
  const std::vector<std::vector<OwnedFrame>> stacks{
      {empty, python("mul", "layer.py", 89), python("model", "m.py", 710)},
      {empty, python("mul", "layer.py", 89), python("model", "m.py", 726)},
      {empty, python("add", "layer.py", 90), python("model", "m.py", 710)},
      {empty, python("add", "layer.py", 90), python("model", "m.py", 726)},
  };
  const std::vector<std::string> labels = labels_of(stacks);
  EXPECT_EQ(std::set<std::string>(labels.begin(), labels.end()).size(), 4u);
  EXPECT_EQ(labels[0], "empty (t.py:1)" + kArrow + "mul (layer.py:89)" + kArrow + "model (m.py:710)");
  EXPECT_EQ(labels[3], "empty (t.py:1)" + kArrow + "add (layer.py:90)" + kArrow + "model (m.py:726)");
}

TEST(SiteLabels, IdenticalStacksShareALabelAndMissingOnesReadAsSuch) {
  const std::vector<OwnedFrame> a{named("alloc"), named("a_caller")};
  const std::vector<OwnedFrame> a_again = a;
  const std::vector<OwnedFrame> b{named("alloc"), named("b_caller")};
  const std::vector<OwnedFrame> none;
  const std::vector<std::string> labels = label_call_sites({&a, &a_again, &b, &none, nullptr});
  EXPECT_EQ(labels[0], "alloc" + kArrow + "a_caller");
  EXPECT_EQ(labels[1], labels[0]);
  EXPECT_EQ(labels[2], "alloc" + kArrow + "b_caller");
  EXPECT_EQ(labels[3], kNoStackLabel);
  EXPECT_EQ(labels[4], kNoStackLabel);
}

TEST(SiteLabels, AStackThatIsAnotherOnesPrefixStaysApart) {
  const std::vector<std::vector<OwnedFrame>> stacks{
      {named("alloc"), named("helper")},
      {named("alloc"), named("helper"), named("user")},
      {named("alloc")},
  };
  const std::vector<std::string> labels = labels_of(stacks);
  EXPECT_EQ(std::set<std::string>(labels.begin(), labels.end()).size(), 3u) << labels[0] << " | " << labels[1];
  EXPECT_EQ(labels[1], "alloc" + kArrow + "user");
}

TEST(SiteLabels, RandomStacksGetUniqueLabels) {
  // Few names, several offsets each, so short names collide and stacks
  // share long prefixes: every level of the labeller is needed somewhere.
  std::mt19937 rng(11);
  const std::vector<std::string> names{"alloc(int)", "wrap<int>(int)", "wrap<float>(int)", "f", "g", "main"};
  for (int round = 0; round < 50; ++round) {
    std::vector<std::vector<OwnedFrame>> stacks;
    std::vector<std::string> tags;
    std::set<std::vector<std::string>> seen;
    for (int i = 0; i < 40; ++i) {
      std::vector<OwnedFrame> frames;
      std::vector<std::string> identity;
      const int depth = 1 + static_cast<int>(rng() % 6);
      for (int d = 0; d < depth; ++d) {
        const std::string& fn = names[rng() % names.size()];
        const std::uint64_t off = 0x10 * (1 + rng() % 3);
        frames.push_back(named(fn, off));
        identity.push_back(fn + "@" + std::to_string(off));
      }
      if (!seen.insert(identity).second) continue;
      stacks.push_back(std::move(frames));
      tags.push_back("stack " + std::to_string(i + 1));
    }
    const std::vector<std::string> labels = labels_of(stacks, tags);
    std::map<std::string, std::size_t> first;
    for (std::size_t i = 0; i < labels.size(); ++i) {
      const auto [it, inserted] = first.emplace(labels[i], i);
      EXPECT_TRUE(inserted) << "round " << round << ": stacks " << it->second << " and " << i << " both read "
                            << labels[i];
    }
    // The random stacks have locations for every frame: no tag needed.
    for (const std::string& label : labels) EXPECT_EQ(label.find("[stack"), std::string::npos) << label;
  }
}

TEST(SiteLabels, OfAnAnalysisCoverEveryAllocatingSite) {
  Analysis analysis;
  testing::EventFeeder feed(analysis);
  feed.stack(1, {"cudaMallocWrapper", "load_weights", "main"});
  feed.stack(2, {"cudaMallocWrapper", "forward", "main"});
  feed.alloc(1, 0x10, 100, 1);
  feed.alloc(2, 0x20, 100, 2);
  feed.alloc(3, 0x30, 100, 0);
  feed.alloc(4, 0x40, 100, 9);  // a stack id with no stack line
  const SiteLabels labels(analysis);
  EXPECT_EQ(labels(1), "cudaMallocWrapper" + kArrow + "load_weights");
  EXPECT_EQ(labels(2), "cudaMallocWrapper" + kArrow + "forward");
  EXPECT_EQ(labels(0), kNoStackLabel);
  EXPECT_EQ(labels(9), "(stack 9, not in the trace)");
  EXPECT_EQ(labels(77), "(stack 77, not in the trace)");
}

}  // namespace
}  // namespace cumemtrace::analyzer::detail
