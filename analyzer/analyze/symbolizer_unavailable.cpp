// FrameSymbolizer in a build without libdw (see analyzer/CMakeLists.txt):
// report --symbolize refuses to run, and nothing here is ever asked to read.
#include "cumemtrace/analyzer/symbolizer.h"

namespace cumemtrace::analyzer {

struct FrameSymbolizer::Module {};

bool FrameSymbolizer::available() { return false; }
FrameSymbolizer::FrameSymbolizer() = default;
FrameSymbolizer::~FrameSymbolizer() = default;
FrameSymbolizer::Module* FrameSymbolizer::module_for(const std::string&) { return nullptr; }
void FrameSymbolizer::symbolize(OwnedFrame&) {}

}  // namespace cumemtrace::analyzer
