// JUnit XML for `cumemtrace check --junit`: the format CI systems (GitLab,
// Jenkins, GitHub test reporters) read. Everything from a trace is escaped.
#include <string>

#include "cumemtrace/analyzer/check.h"

namespace cumemtrace::analyzer {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the valid UTF-8 sequence at the start of `s`, or 0.
std::size_t utf8_sequence(std::string_view s) {
  const auto byte = [&s](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  std::size_t length = 0;
  std::uint32_t code = 0;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    code = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    code = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    code = lead & 0x07;
  } else {
    return 0;
  }
  if (s.size() < length) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    code = code << 6 | (byte(i) & 0x3F);
  }
  const bool overlong = (length == 3 && code < 0x800) || (length == 4 && code < 0x10000);
  const bool surrogate = code >= 0xD800 && code <= 0xDFFF;
  // U+FFFE and U+FFFF are not characters XML allows either.
  if (overlong || surrogate || code > 0x10FFFF || code == 0xFFFE || code == 0xFFFF) return 0;
  return length;
}

std::string count_attribute(std::size_t n) {
  // Appended, not "\"" + ... + "\"": GCC 12 at -O3 warns (-Wrestrict) on that.
  std::string text(1, '"');
  text += std::to_string(n);
  text += '"';
  return text;
}

}  // namespace

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const char c = text.front();
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\t': out += "&#9;"; break;
      case '\n': out += "&#10;"; break;
      case '\r': out += "&#13;"; break;
      default: {
        if (static_cast<unsigned char>(c) < 0x20) {  // forbidden in XML 1.0, even as a reference
          out += kReplacement;
          break;
        }
        const std::size_t length = utf8_sequence(text);
        if (length == 0) {
          out += kReplacement;
          text.remove_prefix(1);
          continue;
        }
        out.append(text.substr(0, length));
        text.remove_prefix(length);
        continue;
      }
    }
    text.remove_prefix(1);
  }
  return out;
}

std::string junit_xml(const std::vector<TraceVerdict>& verdicts) {
  std::size_t tests = 0, failures = 0, errors = 0;
  for (const TraceVerdict& v : verdicts) {
    if (!v.read_error.empty()) {
      ++tests;
      ++errors;
      continue;
    }
    if (!v.incomplete.empty()) {
      ++tests;
      ++failures;
      continue;
    }
    tests += v.results.size();
    for (const CheckResult& r : v.results) failures += r.passed() ? 0 : 1;
  }
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  xml += "<testsuites name=\"cumemtrace check\" tests=" + count_attribute(tests) +
         " failures=" + count_attribute(failures) + " errors=" + count_attribute(errors) + ">\n";
  for (const TraceVerdict& v : verdicts) {
    const std::string suite = xml_escape(v.trace);
    if (!v.read_error.empty()) {
      xml += "  <testsuite name=\"" + suite + "\" tests=\"1\" failures=\"0\" errors=\"1\">\n";
      xml += "    <testcase classname=\"cumemtrace.check\" name=\"read trace\">\n";
      xml += "      <error message=\"" + xml_escape(v.read_error) + "\"/>\n";
      xml += "    </testcase>\n  </testsuite>\n";
      continue;
    }
    // The suite's output: the suppressions' figures, an incomplete trace judged anyway.
    std::string system_out;
    for (const std::string& note : v.notes) system_out += (system_out.empty() ? "" : "\n") + note;
    if (!system_out.empty()) system_out = "    <system-out>" + xml_escape(system_out) + "</system-out>\n";
    if (!v.incomplete.empty()) {
      // Not judged: one failing test that says why and what to do.
      const std::string message = xml_escape(v.incomplete + " (trace " + v.trace + ")");
      xml += "  <testsuite name=\"" + suite + "\" tests=\"1\" failures=\"1\" errors=\"0\">\n";
      xml += "    <testcase classname=\"cumemtrace.check\" name=\"complete trace\">\n";
      xml += "      <failure message=\"" + message + "\">" + message + "</failure>\n    </testcase>\n";
      xml += system_out + "  </testsuite>\n";
      continue;
    }
    std::size_t suite_failures = 0;
    for (const CheckResult& r : v.results) suite_failures += r.passed() ? 0 : 1;
    xml += "  <testsuite name=\"" + suite + "\" tests=" + count_attribute(v.results.size()) +
           " failures=" + count_attribute(suite_failures) + " errors=\"0\">\n";
    for (const CheckResult& r : v.results) {
      const std::string name = describe_check(r.check);
      xml += "    <testcase classname=\"cumemtrace.check\" name=\"" + xml_escape(name) + "\"";
      if (r.passed() && r.undefined) {
        // Passed without a value: the reason goes where CI shows a test's output.
        xml += ">\n      <system-out>" + xml_escape(r.message) + "</system-out>\n    </testcase>\n";
        continue;
      }
      if (r.passed()) {
        xml += "/>\n";
        continue;
      }
      const std::string message = xml_escape(r.message + " (trace " + v.trace + ")");
      xml += ">\n      <failure message=\"" + message + "\">" + message + "</failure>\n    </testcase>\n";
    }
    xml += system_out + "  </testsuite>\n";
  }
  xml += "</testsuites>\n";
  return xml;
}

}  // namespace cumemtrace::analyzer
