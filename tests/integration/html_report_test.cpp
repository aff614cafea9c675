// The HTML report as a browser sees it: headless Chromium loads the page
// without a console message, its screenshot shows the charts in their
// colours, and markup in a trace's names stays text (no element, no
// attribute, in the page we write nor in the DOM Chromium builds). Skips
// when Chromium is missing; scripts/setup.sh installs it.
#include <gtest/gtest.h>
#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "html_structure.h"
#include "test_support.h"

namespace cumemtrace::testing {
namespace {

const std::string kCharts = std::string(CUMEMTRACE_GOLDEN_DIR) + "/charts/traces/";

std::string html_report(const std::string& trace, const TempDir& tmp, const std::string& name) {
  const std::string out = tmp.path(name);
  const CommandResult r = run_command({CUMEMTRACE_CLI, "report", trace, "--format", "html", "-o", out});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  return out;
}

// CUMEMTRACE_CHROMIUM, the one CMake found, or chromium on PATH; "" if none.
std::string chromium() {
  if (const char* env = std::getenv("CUMEMTRACE_CHROMIUM"); env != nullptr && *env != '\0') return env;
  if (std::string configured = CUMEMTRACE_CHROMIUM_PATH; !configured.empty() && ::access(configured.c_str(), X_OK) == 0) {
    return configured;
  }
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    for (const char* name : {"chromium", "chromium-browser"}) {
      const std::string candidate = dir + "/" + name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "";
}

// Headless, with its own profile (runs in parallel cannot collide) and a
// time limit; --no-sandbox because CI runs as root in a container.
CommandResult run_chromium(const TempDir& tmp, std::vector<std::string> args) {
  std::vector<std::string> argv{"timeout", "120", chromium(), "--headless", "--disable-gpu", "--no-sandbox",
                                "--no-first-run", "--disable-extensions", "--disable-dev-shm-usage",
                                "--user-data-dir=" + tmp.path("profile"), "--force-color-profile=srgb",
                                "--hide-scrollbars", "--enable-logging=stderr", "--v=0"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

// What the page made Chromium say: console messages (CSP violations,
// errors) and failed loads. Chromium's own start-up chatter (D-Bus, GPU) is not about the page.
std::vector<std::string> page_complaints(const std::string& stderr_text) {
  std::vector<std::string> lines;
  std::stringstream in(stderr_text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(":CONSOLE") != std::string::npos || line.find("Failed to load") != std::string::npos ||
        line.find("net::ERR_") != std::string::npos || line.find("Content Security Policy") != std::string::npos) {
      lines.push_back(line);
    }
  }
  return lines;
}

struct Image {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  std::vector<unsigned char> rgb;
  const unsigned char* at(std::uint32_t x, std::uint32_t y) const { return &rgb[(std::size_t{y} * width + x) * 3]; }
};

Image read_png(const std::string& path) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  Image image;
  if (png_image_begin_read_from_file(&png, path.c_str()) == 0) {
    ADD_FAILURE() << path << ": " << png.message;
    return image;
  }
  png.format = PNG_FORMAT_RGB;
  image.rgb.resize(PNG_IMAGE_SIZE(png));
  if (png_image_finish_read(&png, nullptr, image.rgb.data(), 0, nullptr) == 0) {
    ADD_FAILURE() << path << ": " << png.message;
    png_image_free(&png);
    return Image{};
  }
  image.width = png.width;
  image.height = png.height;
  return image;
}

struct ColourCount {
  std::size_t pixels = 0;
  // Where the colour is dense (rows and columns with 40 pixels of it or
  // more): text anti-aliasing elsewhere can hit any colour now and then.
  std::uint32_t min_x = UINT32_MAX, max_x = 0, min_y = UINT32_MAX, max_y = 0;
};

// Pixels within a small tolerance of `hex` (#rrggbb), and where they are.
ColourCount count_colour(const Image& image, const char* hex) {
  const unsigned value = static_cast<unsigned>(std::strtoul(hex + 1, nullptr, 16));
  const int want[3] = {static_cast<int>(value >> 16), static_cast<int>((value >> 8) & 0xFF), static_cast<int>(value & 0xFF)};
  ColourCount c;
  std::vector<std::uint32_t> per_row(image.height, 0), per_column(image.width, 0);
  for (std::uint32_t y = 0; y < image.height; ++y) {
    for (std::uint32_t x = 0; x < image.width; ++x) {
      const unsigned char* p = image.at(x, y);
      if (std::abs(p[0] - want[0]) <= 3 && std::abs(p[1] - want[1]) <= 3 && std::abs(p[2] - want[2]) <= 3) {
        ++c.pixels;
        ++per_row[y];
        ++per_column[x];
      }
    }
  }
  constexpr std::uint32_t kDense = 40;
  for (std::uint32_t y = 0; y < image.height; ++y) {
    if (per_row[y] >= kDense) c.min_y = std::min(c.min_y, y), c.max_y = std::max(c.max_y, y);
  }
  for (std::uint32_t x = 0; x < image.width; ++x) {
    if (per_column[x] >= kDense) c.min_x = std::min(c.min_x, x), c.max_x = std::max(c.max_x, x);
  }
  return c;
}

TEST(HtmlInChromium, PageLoadsCleanlyAndTheScreenshotShowsTheCharts) {
  if (chromium().empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs it)";
  TempDir tmp;
  const std::string page = html_report(kCharts + "charts_caching_oom.jsonl", tmp, "report.html");
  const std::string shot = tmp.path("shot.png");
  const CommandResult r =
      run_chromium(tmp, {"--screenshot=" + shot, "--window-size=1400,2400", "file://" + page});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(page_complaints(r.err), std::vector<std::string>{}) << "the page made the browser complain";
  const Image image = read_png(shot);
  ASSERT_EQ(image.width, 1400u);
  ASSERT_EQ(image.height, 2400u);

  // The memory chart: allocated (blue) inside reserved (amber), wide and near the top.
  const ColourCount allocated = count_colour(image, "#a9c8f5");
  const ColourCount reserved = count_colour(image, "#fde2a6");
  EXPECT_GT(allocated.pixels, 40000u);
  EXPECT_GT(reserved.pixels, 40000u);
  ASSERT_LT(allocated.min_y, allocated.max_y);
  EXPECT_GT(allocated.max_x - allocated.min_x, 700u) << "the chart spans most of the page";
  EXPECT_LT(allocated.min_y, 1000u);
  // Lines, the peak and the OOM markers are drawn.
  EXPECT_GT(count_colour(image, "#1f5fbf").pixels, 1000u);
  EXPECT_GT(count_colour(image, "#c98500").pixels, 500u);
  EXPECT_GT(count_colour(image, "#cf222e").pixels, 300u);
  // The fragmentation line and the segment maps' site colours.
  EXPECT_GT(count_colour(image, "#7b4fc9").pixels, 500u);
  EXPECT_GT(count_colour(image, "#2f6fdd").pixels, 3000u);
  EXPECT_GT(count_colour(image, "#e07b00").pixels, 1500u);
  EXPECT_GT(count_colour(image, "#e3e6ea").pixels, 2000u);  // free space in segments
  // The chart region is mostly drawn, not blank.
  std::size_t inked = 0, total = 0;
  for (std::uint32_t y = allocated.min_y; y <= allocated.max_y; ++y) {
    for (std::uint32_t x = allocated.min_x; x <= allocated.max_x; ++x, ++total) {
      const unsigned char* p = image.at(x, y);
      if (p[0] < 245 || p[1] < 245 || p[2] < 245) ++inked;
    }
  }
  EXPECT_GT(inked * 2, total) << "allocated spans x " << allocated.min_x << ".." << allocated.max_x << ", y "
                              << allocated.min_y << ".." << allocated.max_y;
}

// Tags and attributes anything of ours may carry, in the page we write and
// in the DOM once the flame graphs' script has drawn (its tabs and buttons);
// an injected element or event handler is outside these. The only <script>s
// are ours (expect_only_our_script).
const std::set<std::string> kTags{"html", "head", "meta", "title", "style", "body", "main", "header", "nav", "a",
                                  "section", "h1", "h2", "h3", "p", "table", "thead", "tbody", "tr", "th", "td",
                                  "details", "summary", "ol", "ul", "li", "code", "span", "small", "svg", "g", "rect",
                                  "line", "path", "circle", "text", "div", "script", "button"};
const std::set<std::string> kAttributes{"lang", "charset", "http-equiv", "content", "name", "href", "id", "class",
                                        "style", "xmlns", "width", "height", "viewbox", "role", "x", "y", "x1", "x2",
                                        "y1", "y2", "d", "cx", "cy", "r", "fill", "stroke", "stroke-width",
                                        "stroke-dasharray", "text-anchor",
                                        // A stack's frame numbers (<ol start>, <li value>), written from
                                        // integers, never from the trace.
                                        "start", "value",
                                        // The flame graphs' data block and the controls their script adds.
                                        "type", "aria-selected", "disabled", "hidden"};

void expect_only_our_markup(const std::vector<HtmlTag>& tags) {
  for (const HtmlTag& tag : tags) {
    EXPECT_TRUE(kTags.count(tag.name)) << "element <" << tag.name << "> at byte " << tag.offset;
    for (const auto& [name, value] : tag.attributes) {
      EXPECT_TRUE(kAttributes.count(name)) << "attribute " << name << "=" << value << " on <" << tag.name << ">";
      if (name == "href") {
        EXPECT_EQ(value.rfind('#', 0), 0u) << "a link out of the page: " << value;
      }
      if (name == "style") {
        EXPECT_EQ(value.rfind("background:#", 0), 0u) << value;
      }
    }
  }
}

// base64 of the SHA-256 of `text`, from coreutils' sha256sum: the value a
// browser compares with a CSP 'sha256-…' source, computed apart from the
// build step that wrote the page's.
std::string sha256_base64(const std::string& text) {
  TempDir tmp;
  write_file(tmp.path("script.js"), text);
  const CommandResult r = run_command({"sha256sum", tmp.path("script.js")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.out.size() < 64) return "";
  std::string bytes;
  for (std::size_t i = 0; i < 64; i += 2) bytes += static_cast<char>(std::stoi(r.out.substr(i, 2), nullptr, 16));
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);  // n bytes give n + 1 characters
    std::uint32_t group = 0;
    for (std::size_t k = 0; k < 3; ++k) group = group << 8 | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(group >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// The page's scripts: one JSON data block of the flame graphs per trace
// (type application/json, which no browser runs, and without a '<' that
// could end it early) and, last, analyzer/render/flame_graph.js byte for
// byte. The Content-Security-Policy allows exactly that script, by the
// SHA-256 of its text, and loads nothing.
void expect_only_our_script(const std::string& page, std::size_t data_blocks) {
  std::string error;
  const std::vector<HtmlTag> tags = scan_html_tags(page, &error);
  EXPECT_EQ(error, "");
  std::vector<const HtmlTag*> scripts;
  std::string csp;
  for (const HtmlTag& tag : tags) {
    if (tag.name == "script" && !tag.closing) scripts.push_back(&tag);
    if (tag.name == "meta" && !tag.attributes.empty() && tag.attributes[0] ==
        std::pair<std::string, std::string>("http-equiv", "Content-Security-Policy")) {
      ASSERT_EQ(tag.attributes.size(), 2u);
      csp = tag.attributes[1].second;
    }
  }
  ASSERT_EQ(scripts.size(), data_blocks + 1);
  for (std::size_t i = 0; i < data_blocks; ++i) {
    using Attributes = std::vector<std::pair<std::string, std::string>>;
    EXPECT_EQ(scripts[i]->attributes, (Attributes{{"type", "application/json"}, {"class", "flamedata"}}));
    const std::size_t end = page.find("</script>", scripts[i]->end);
    ASSERT_NE(end, std::string::npos);
    EXPECT_EQ(page.substr(scripts[i]->end, end - scripts[i]->end).find('<'), std::string::npos);
    EXPECT_TRUE(nlohmann::json::accept(page.substr(scripts[i]->end, end - scripts[i]->end)));
  }
  const HtmlTag& ours = *scripts.back();
  EXPECT_TRUE(ours.attributes.empty());
  const std::size_t end = page.find("</script>", ours.end);
  ASSERT_NE(end, std::string::npos);
  const std::string text = page.substr(ours.end, end - ours.end);
  EXPECT_EQ(text, read_file(CUMEMTRACE_FLAME_SCRIPT));
  EXPECT_EQ(page.substr(end), "</script></body></html>\n") << "the script comes last";
  EXPECT_EQ(csp, "default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-" + sha256_base64(text) +
                     "'; base-uri 'none'; form-action 'none'");
}

// The same trace with every character that could make markup replaced.
std::string defused_twin(const std::string& trace_path, const TempDir& tmp) {
  std::stringstream in(read_file(trace_path));
  std::string out;
  std::function<void(nlohmann::ordered_json&)> defuse = [&](nlohmann::ordered_json& j) {
    if (j.is_string()) {
      std::string s = j.get<std::string>();
      for (char& c : s) {
        if (c == '<' || c == '>' || c == '&' || c == '"' || c == '\'') c = 'x';
      }
      j = s;
    } else if (j.is_structured()) {
      for (auto& child : j) defuse(child);
    }
  };
  for (std::string line; std::getline(in, line);) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);
    if (j.is_object()) {
      for (auto& [key, value] : j.items()) defuse(value);
    }
    out += j.dump() + "\n";
  }
  write_file(tmp.path("twin.jsonl"), out);
  return tmp.path("twin.jsonl");
}

std::vector<std::string> shape(const std::vector<HtmlTag>& tags) {
  std::vector<std::string> names;
  for (const HtmlTag& tag : tags) {
    std::string s = (tag.closing ? "/" : "") + tag.name;
    for (const auto& [name, value] : tag.attributes) s += " " + name;
    names.push_back(s);
  }
  return names;
}

TEST(HtmlInjection, MarkupInTraceNamesAddsNoElementNorAttribute) {
  TempDir tmp;
  const std::string trace = kCharts + "charts_markup_names.jsonl";
  const std::string page = read_file(html_report(trace, tmp, "markup.html"));
  std::string error;
  const std::vector<HtmlTag> tags = scan_html_tags(page, &error);
  EXPECT_EQ(error, "");
  expect_only_our_markup(tags);
  expect_only_our_script(page, 1);
  // The same trace without markup characters gives the very same elements.
  const std::string twin_page = read_file(html_report(defused_twin(trace, tmp), tmp, "twin.html"));
  std::string twin_error;
  EXPECT_EQ(shape(tags), shape(scan_html_tags(twin_page, &twin_error)));
  // The names are there, as text.
  for (const char* escaped : {"&lt;script&gt;alert(1)&lt;/script&gt;", "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;",
                              "]]&gt;&lt;/title&gt;&lt;script&gt;alert(3)&lt;/script&gt;",
                              "&lt;/script&gt;&lt;svg onload=alert(4)&gt;", "&lt;marquee&gt;GPU&lt;/marquee&gt;",
                              "operator&amp;(A const&amp;, B const&amp;)", "/opt/&lt;lib&gt;/lib&#39;q&#39;.so",
                              "ctl\xEF\xBF\xBD" "char &amp; \xC3\xA9t\xC3\xA9"}) {
    EXPECT_NE(page.find(escaped), std::string::npos) << escaped;
  }
}

TEST(HtmlInChromium, MarkupInTraceNamesStaysTextInTheDom) {
  if (chromium().empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs it)";
  TempDir tmp;
  const std::string page = html_report(kCharts + "charts_markup_names.jsonl", tmp, "markup.html");
  const CommandResult r = run_chromium(tmp, {"--dump-dom", "file://" + page});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(page_complaints(r.err), std::vector<std::string>{});
  std::string error;
  const std::vector<HtmlTag> dom = scan_html_tags(r.out, &error);
  EXPECT_EQ(error, "");
  ASSERT_GT(dom.size(), 100u) << r.out.substr(0, 2000);
  expect_only_our_markup(dom);
  // The DOM's text holds the names literally (serialised with < > & escaped).
  for (const char* text : {"&lt;script&gt;alert(1)&lt;/script&gt;", "\"&gt;&lt;img src=x onerror=alert(2)&gt;",
                           "&lt;b&gt;bold&lt;/b&gt;", "&lt;!-- c --&gt; &amp; ]]&gt;"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text;
  }
}

const std::string kReportTraces = std::string(CUMEMTRACE_GOLDEN_DIR) + "/traces/";

std::string html_multi_report(const std::vector<std::string>& traces, const TempDir& tmp, const std::string& name) {
  const std::string out = tmp.path(name);
  std::vector<std::string> argv{CUMEMTRACE_CLI, "report"};
  argv.insert(argv.end(), traces.begin(), traces.end());
  argv.insert(argv.end(), {"--format", "html", "-o", out});
  const CommandResult r = run_command(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  return out;
}

// Every id once, and every in-page link to one of them.
void expect_anchors_resolve(const std::vector<HtmlTag>& tags) {
  std::map<std::string, int> ids;
  for (const HtmlTag& tag : tags) {
    for (const auto& [name, value] : tag.attributes) {
      if (name == "id") ++ids[value];
    }
  }
  for (const auto& [id, count] : ids) EXPECT_EQ(count, 1) << "id " << id;
  for (const HtmlTag& tag : tags) {
    for (const auto& [name, value] : tag.attributes) {
      if (name == "href") {
        EXPECT_TRUE(ids.count(value.substr(1))) << "a link to nothing: " << value;
      }
    }
  }
}

TEST(HtmlInChromium, SeveralTracesShowEveryProcessInOneChartAndEachReport) {
  if (chromium().empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs it)";
  TempDir tmp;
  const std::string page =
      html_multi_report({kReportTraces + "job.rank0.jsonl", kReportTraces + "job.rank1.jsonl"}, tmp, "ranks.html");
  const std::string text = read_file(page);
  // The processes by rank, the table with its totals, then each trace's own report.
  for (const char* expected : {"<h1>cumemtrace report: 2 processes</h1>", "<section id=\"processes\">",
                               "<th>total</th>", "135.00 MiB", "rank 0 \xC2\xB7 pid 9000 on node7",
                               "rank 1 \xC2\xB7 pid 9001 on node7", "rank 1: peak 75.00 MiB", "all processes"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected;
  }
  EXPECT_LT(text.find("id=\"processes\""), text.find("id=\"p0-summary\""));
  EXPECT_LT(text.find("id=\"p0-summary\""), text.find("id=\"p1-summary\""));
  std::string error;
  const std::vector<HtmlTag> tags = scan_html_tags(text, &error);
  EXPECT_EQ(error, "");
  expect_only_our_markup(tags);
  expect_anchors_resolve(tags);

  const std::string shot = tmp.path("shot.png");
  const CommandResult r = run_chromium(tmp, {"--screenshot=" + shot, "--window-size=1400,2400", "file://" + page});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(page_complaints(r.err), std::vector<std::string>{}) << "the page made the browser complain";
  const Image image = read_png(shot);
  ASSERT_EQ(image.height, 2400u);
  // One series per process in the combined chart (rank 0 green, rank 1
  // purple), near the top, and the dashed sum of both.
  const ColourCount rank0 = count_colour(image, "#2da44e");
  const ColourCount rank1 = count_colour(image, "#8250df");
  EXPECT_GT(rank0.pixels, 800u);
  EXPECT_GT(rank1.pixels, 800u);
  EXPECT_GT(count_colour(image, "#000000").pixels, 800u);
  EXPECT_LT(std::min(rank0.min_y, rank1.min_y), 900u) << "the combined chart comes first";
  // Below it, the first process's own memory chart.
  const ColourCount allocated = count_colour(image, "#a9c8f5");
  EXPECT_GT(allocated.pixels, 20000u);
  EXPECT_GT(allocated.min_y, rank0.max_y);
}

TEST(HtmlInjection, SeveralTracesKeepEveryStringText) {
  TempDir tmp;
  // A second copy of the markup trace under a file name that is markup too.
  const std::string odd_name = tmp.path("x<b>\"&'rank1.jsonl");
  write_file(odd_name, read_file(kCharts + "charts_markup_names.jsonl"));
  const std::string page = read_file(html_multi_report({kCharts + "charts_markup_names.jsonl", odd_name}, tmp, "m.html"));
  std::string error;
  const std::vector<HtmlTag> tags = scan_html_tags(page, &error);
  EXPECT_EQ(error, "");
  expect_only_our_markup(tags);
  expect_anchors_resolve(tags);
  expect_only_our_script(page, 2);
  EXPECT_NE(page.find("x&lt;b&gt;&quot;&amp;&#39;rank1.jsonl"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  // The same two traces without markup characters give the very same elements.
  const std::string twin = defused_twin(kCharts + "charts_markup_names.jsonl", tmp);
  const std::string plain_name = tmp.path("xxbxxxxrank1.jsonl");
  write_file(plain_name, read_file(twin));
  const std::string twin_page = read_file(html_multi_report({twin, plain_name}, tmp, "t.html"));
  std::string twin_error;
  EXPECT_EQ(shape(tags), shape(scan_html_tags(twin_page, &twin_error)));
}

}  // namespace
}  // namespace cumemtrace::testing
