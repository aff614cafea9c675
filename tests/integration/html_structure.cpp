#include "html_structure.h"

#include <cctype>
#include <map>

#include <nlohmann/json.hpp>

namespace cumemtrace::testing {

namespace {

bool is_alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::size_t find_nocase(const std::string& text, const std::string& needle, std::size_t from) {
  return lower(text).find(needle, from);
}

}  // namespace

std::vector<HtmlTag> scan_html_tags(const std::string& html, std::string* error) {
  std::vector<HtmlTag> tags;
  const auto fail = [&](const std::string& what, std::size_t at) {
    if (error != nullptr && error->empty()) *error = what + " at byte " + std::to_string(at);
  };
  int svg_depth = 0;
  std::size_t pos = 0;
  const std::size_t n = html.size();
  while (pos < n) {
    const std::size_t lt = html.find('<', pos);
    if (lt == std::string::npos || lt + 1 >= n) break;
    const char next = html[lt + 1];
    if (next == '!') {
      if (html.compare(lt, 4, "<!--") == 0) {
        fail("a comment", lt);
        const std::size_t end = html.find("-->", lt + 4);
        pos = end == std::string::npos ? n : end + 3;
      } else {
        const std::size_t end = html.find('>', lt);
        pos = end == std::string::npos ? n : end + 1;
      }
      continue;
    }
    const bool closing = next == '/';
    const std::size_t name_start = lt + (closing ? 2 : 1);
    if (name_start >= n || !is_alpha(html[name_start])) {
      fail("a '<' that opens no tag", lt);  // the writer escapes every '<' of text
      pos = lt + 1;
      continue;
    }
    HtmlTag tag;
    tag.closing = closing;
    tag.offset = lt;
    std::size_t i = name_start;
    while (i < n && !is_space(html[i]) && html[i] != '/' && html[i] != '>') tag.name += html[i++];
    tag.name = lower(tag.name);
    // Attributes, as the tokenizer's attribute states read them.
    for (;;) {
      while (i < n && (is_space(html[i]) || html[i] == '/')) {
        if (html[i] == '/' && i + 1 < n && html[i + 1] == '>') tag.self_closing = true;
        ++i;
      }
      if (i >= n) {
        fail("an unterminated tag", lt);
        break;
      }
      if (html[i] == '>') {
        ++i;
        break;
      }
      std::string name;
      while (i < n && !is_space(html[i]) && html[i] != '/' && html[i] != '>' && html[i] != '=') name += html[i++];
      while (i < n && is_space(html[i])) ++i;
      std::string value;
      if (i < n && html[i] == '=') {
        ++i;
        while (i < n && is_space(html[i])) ++i;
        if (i < n && (html[i] == '"' || html[i] == '\'')) {
          const char quote = html[i++];
          const std::size_t end = html.find(quote, i);
          if (end == std::string::npos) {
            fail("an unterminated attribute value", i);
            i = n;
          } else {
            value = html.substr(i, end - i);
            i = end + 1;
          }
        } else {
          fail("an unquoted attribute value", i);
          while (i < n && !is_space(html[i]) && html[i] != '>') value += html[i++];
        }
      }
      tag.attributes.emplace_back(lower(name), value);
    }
    tag.end = i;
    if (tag.name == "svg") svg_depth += closing ? -1 : (tag.self_closing ? 0 : 1);
    pos = i;
    tags.push_back(tag);
    // Raw text elements: their content is text up to their end tag, whatever it holds.
    const bool raw = tag.name == "style" || tag.name == "script" || (tag.name == "title" && svg_depth == 0);
    if (!closing && raw) {
      const std::size_t end = find_nocase(html, "</" + tag.name, pos);
      if (end == std::string::npos) {
        fail("an unterminated <" + tag.name + ">", lt);
        break;
      }
      pos = end;
    }
  }
  return tags;
}

namespace {

// The flame graphs' data block in a line: each view's bytes and frames by
// kind (flame_graph.js describes the data), and the size of the names table.
std::string flame_data_summary(const std::string& text) {
  const nlohmann::json data = nlohmann::json::parse(text, nullptr, false);
  if (data.is_discarded() || !data.is_object()) return "invalid JSON";
  std::string out;
  for (const nlohmann::json& view : data.value("views", nlohmann::json::array())) {
    if (!out.empty()) out += "; ";
    if (!view.is_object()) {
      out += "null";
      continue;
    }
    std::map<char, int> kinds;
    for (char k : view.value("k", std::string())) ++kinds[k];
    out += view.value("what", std::string("?")) + " " + std::to_string(view.value("total", std::uint64_t{0})) +
           " bytes, frames:";
    for (const auto& [kind, count] : kinds) out += std::string(" ") + kind + "\xC3\x97" + std::to_string(count);
  }
  return out + "; " + std::to_string(data.value("names", nlohmann::json::array()).size()) + " names";
}

bool has_attribute(const HtmlTag& tag, const std::string& name, const std::string& value) {
  for (const auto& [n, v] : tag.attributes) {
    if (n == name && v == value) return true;
  }
  return false;
}

}  // namespace

std::string html_outline(const std::string& html) {
  std::string error;
  const std::vector<HtmlTag> tags = scan_html_tags(html, &error);
  std::string out;
  if (!error.empty()) out += "! " + error + "\n";
  static const std::map<std::string, bool> kVoid{{"meta", true}, {"br", true}, {"img", true}, {"link", true},
                                                 {"input", true}, {"hr", true}};
  int depth = 0;
  const auto line = [&](int indent, const std::string& text) { out += std::string(2 * indent, ' ') + text + "\n"; };
  const auto text_between = [&](std::size_t from, std::size_t to) {
    std::string text;
    bool space = false;
    for (std::size_t i = from; i < to; ++i) {
      if (is_space(html[i])) {
        space = true;
        continue;
      }
      if (space && !text.empty()) text += ' ';
      space = false;
      text += html[i];
    }
    return text;
  };
  for (std::size_t k = 0; k < tags.size(); ++k) {
    const HtmlTag& tag = tags[k];
    if (tag.name == "svg" && !tag.closing) {
      // An SVG in one block: what it draws, by count, and what it says.
      std::map<std::string, int> counts;
      std::vector<std::string> texts;
      std::size_t j = k + 1;
      for (int nested = 1; j < tags.size() && nested > 0; ++j) {
        const HtmlTag& inner = tags[j];
        if (inner.name == "svg") nested += inner.closing ? -1 : 1;
        if (inner.closing || nested == 0) continue;
        ++counts[inner.name];
        if ((inner.name == "text" || inner.name == "title") && j + 1 < tags.size()) {
          texts.push_back(inner.name + " \"" + text_between(inner.end, tags[j + 1].offset) + "\"");
        }
      }
      std::string summary = "svg";
      for (const auto& [name, value] : tag.attributes) {
        if (name == "class") summary += "." + value;
      }
      summary += " [";
      for (const auto& [name, count] : counts) summary += " " + name + "\xC3\x97" + std::to_string(count);
      line(depth, summary + " ]");
      for (const std::string& text : texts) line(depth + 1, text);
      k = j - 1;
      continue;
    }
    if (tag.closing) {
      --depth;
    } else {
      std::string head = tag.name;
      for (const auto& [name, value] : tag.attributes) {
        if (name == "id") head += "#" + value;
        if (name == "class") head += "." + value;
        if (name == "href") head += " href=" + value;
      }
      line(depth, head);
      if (!kVoid.count(tag.name) && !tag.self_closing) ++depth;
    }
    if (tag.name == "style" && !tag.closing) continue;  // the constant sheet
    if (tag.name == "script" && !tag.closing) {
      // The flame graphs' data in brief; the script itself is a constant file.
      if (has_attribute(tag, "type", "application/json") && k + 1 < tags.size()) {
        line(depth, "data: " + flame_data_summary(html.substr(tag.end, tags[k + 1].offset - tag.end)));
      }
      continue;
    }
    if (k + 1 < tags.size()) {
      const std::string text = text_between(tag.end, tags[k + 1].offset);
      if (!text.empty()) line(depth, "\"" + text + "\"");
    }
  }
  return out;
}

}  // namespace cumemtrace::testing
