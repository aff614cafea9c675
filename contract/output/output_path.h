// Creating the trace file (TRACE_FORMAT.md, File naming), by the preload
// and by `cumemtrace run`, which checks before the program starts that the
// file can be made; the name comes from output_template.h.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>

namespace cumemtrace::contract {

// Creates `path` exclusively (O_EXCL), never following a symlink, mode 0600,
// in a directory the user controls (directory_refusal). Returns the
// descriptor, or a negative code that trace_file_error explains.
int create_trace_file(const std::string& path);

// Why a trace may not be created in a directory with status `dir` by the
// user `user` (a negative code), or 0 if it may: the directory is writable
// by every user without the sticky bit, or it belongs to another user
// (not root) and others may write to it.
int directory_refusal(const struct stat& dir, uid_t user);

// The words for a negative code of create_trace_file: strerror, or why the
// directory was refused.
const char* trace_file_error(int code);

// `path` with ".N" before its trace extension: t.jsonl → t.1.jsonl,
// t.jsonl.zst → t.1.jsonl.zst, t.zst → t.1.zst, t → t.1.
std::string numbered_trace_path(const std::string& path, int n);

// Like create_trace_file; when `path` exists and `numbered_if_taken`, tries
// numbered_trace_path(path, 1), 2, … instead, and updates `path` to the name
// created. Used when the name holds the pid: a process that exec'd keeps its
// pid, and its new program's trace must not fail on the old program's file.
int create_trace_file(std::string& path, bool numbered_if_taken);

}  // namespace cumemtrace::contract
