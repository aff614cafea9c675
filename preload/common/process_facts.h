// Facts about this process for the trace header and the frame namer, read
// from /proc.
#pragma once

#include <string>
#include <vector>

namespace cumemtrace::preload {

std::string executable_path();            // /proc/self/exe
std::vector<std::string> command_line();  // /proc/self/cmdline
std::string host_name();

}  // namespace cumemtrace::preload
