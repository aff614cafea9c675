// Reading the HTML report's structure back, for the tests: its tags and
// attributes as an HTML parser's tokenizer sees them (so markup that escaped
// its text would show up as an element), and a readable outline of the page
// for golden files (elements and text, without SVG coordinates).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace cumemtrace::testing {

struct HtmlTag {
  std::string name;  // lowercase
  bool closing = false;
  bool self_closing = false;  // written `<x .../>`
  std::vector<std::pair<std::string, std::string>> attributes;  // names lowercase, values as written
  std::size_t offset = 0;  // of its '<'
  std::size_t end = 0;     // just past its '>'
};

// Start and end tags in document order. Follows the HTML tokenizer where it
// matters for injection: '<' + letter opens a tag, '</' + letter an end tag,
// '<!' a comment or doctype; <style>, <script> and <title> (outside SVG)
// hold raw text up to their end tag. `error` gets a description of anything
// the writer should never produce (an unterminated tag, a comment).
std::vector<HtmlTag> scan_html_tags(const std::string& html, std::string* error);

// One line per element, indented by nesting: `tag#id.class` and its own
// text; an SVG is summarised by its element counts and its texts and titles,
// the flame graphs' JSON block by each view's bytes and frames by kind, and
// the text of <style> and of the page's own <script> is left out.
std::string html_outline(const std::string& html);

}  // namespace cumemtrace::testing
