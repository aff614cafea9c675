// Escaping for the HTML report: every string that comes from a trace (names
// of functions, marks, modules, APIs, the command line) goes through here
// before it is written into the page, in text or in a double-quoted
// attribute. The page never puts trace text inside <style>, and inside a
// <script> only as the flame graphs' JSON data (html_flame.h), which writes
// every '<' as \u003c instead.
#pragma once

#include <string>
#include <string_view>

namespace cumemtrace::analyzer::detail {

// Appends `text` with & < > " ' written as character references, so it is
// inert both as element content and inside a double- or single-quoted
// attribute value. Bytes that are not valid UTF-8, and control characters
// other than tab and newline, become U+FFFD: the HTML parser would otherwise
// report them, and they have no business in a name.
void append_html(std::string& out, std::string_view text);

inline std::string html(std::string_view text) {
  std::string out;
  append_html(out, text);
  return out;
}

}  // namespace cumemtrace::analyzer::detail
