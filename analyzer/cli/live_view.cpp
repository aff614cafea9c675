#include "live_view.h"

#include <limits.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "read/following_source.h"
#include "render/live_view.h"

namespace cumemtrace::cli {

namespace {

using Clock = std::chrono::steady_clock;
using analyzer::detail::LiveFigures;

constexpr const char* kEsc = "\x1b";

void live_write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return;  // a closed terminal: nothing more to show
    }
  }
}

struct LiveSize {
  std::size_t columns = 80;
  std::size_t rows = 24;
  bool operator==(const LiveSize&) const = default;
};

LiveSize live_window_size(int fd) {
  struct winsize ws {};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) return {ws.ws_col, ws.ws_row};
  return {};
}

std::string live_host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return {};
  return name;
}

// The header's process no longer runs on this host: gone, or a zombie
// nobody reaped yet (it writes nothing more either). A pid of another host
// (a trace on a shared file system) is never declared gone.
bool live_writer_gone(const analyzer::TraceHeader& header) {
  if (header.pid <= 0 || header.pid > INT_MAX) return false;
  if (!header.host.empty() && header.host != live_host_name()) return false;
  const auto pid = static_cast<pid_t>(header.pid);
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const std::size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && (text[paren + 2] == 'Z' || text[paren + 2] == 'X');
}

std::string live_base_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Where the frames go, in each of the three outputs.
class LiveScreen {
 public:
  explicit LiveScreen(const LiveOptions& options) : o_(options) {}

  void open() {
    if (o_.output == LiveOutput::full_screen) {
      // The alternate screen, as top(1) and less(1) use: the shell's screen
      // comes back unchanged on leaving.
      live_write_all(o_.fd, std::string(kEsc) + "[?1049h" + kEsc + "[?25l" + kEsc + "[H" + kEsc + "[2J");
    } else if (o_.output == LiveOutput::bottom_panel) {
      size_ = live_window_size(o_.fd);
      panel_ = panel_rows(size_);
      if (panel_ == 0) return;
      // Room for the panel below what is on the screen, then a scroll
      // region (DECSTBM) above it: the program's output scrolls there and
      // never into the panel. DECSTBM homes the cursor: saved around it.
      std::string text(panel_, '\n');
      text += std::string(kEsc) + "[" + std::to_string(panel_) + "A" + kEsc + "7" + scroll_region() + kEsc + "8";
      live_write_all(o_.fd, text);
    }
  }

  void draw(const LiveFigures& figures) {
    switch (o_.output) {
      case LiveOutput::lines:
        live_write_all(o_.fd, o_.line_prefix + line_of(figures) + "\n");
        return;
      case LiveOutput::full_screen: {
        const LiveSize size = live_window_size(o_.fd);
        std::string text = std::string(kEsc) + "[H";
        const auto lines = analyzer::detail::live_frame(figures, size.columns, size.rows);
        for (std::size_t i = 0; i < lines.size(); ++i) {
          text += lines[i] + kEsc + "[K";
          if (i + 1 < lines.size()) text += "\r\n";
        }
        live_write_all(o_.fd, text + kEsc + "[J");
        return;
      }
      case LiveOutput::bottom_panel: {
        const LiveSize size = live_window_size(o_.fd);
        std::string text;
        if (!(size == size_)) {  // resized: the region follows the new height
          size_ = size;
          panel_ = panel_rows(size_);
          text += std::string(kEsc) + "7" + scroll_region() + kEsc + "8";
        }
        if (panel_ == 0) {
          live_write_all(o_.fd, text);
          return;
        }
        // One write: the terminal's line discipline takes a write whole, so
        // the program's output never lands inside the panel while the cursor
        // is down there; the cursor (DECSC/DECRC) is back where the program
        // left it.
        const auto lines = analyzer::detail::live_frame(figures, size_.columns, panel_ - 1);
        text += std::string(kEsc) + "7";
        std::string rule;
        for (std::size_t i = 0; i < size_.columns; ++i) rule += "\xE2\x94\x80";  // ─
        for (std::size_t row = 0; row < panel_; ++row) {
          text += std::string(kEsc) + "[" + std::to_string(size_.rows - panel_ + 1 + row) + ";1H";
          if (row == 0) {
            text += rule;
          } else if (row - 1 < lines.size()) {
            text += lines[row - 1];
          }
          text += std::string(kEsc) + "[K";
        }
        live_write_all(o_.fd, text + kEsc + "8");
        return;
      }
    }
  }

  // The last frame stays readable after the view is gone.
  void close(const LiveFigures& figures) {
    switch (o_.output) {
      case LiveOutput::lines:
        draw(figures);
        return;
      case LiveOutput::full_screen: {
        live_write_all(o_.fd, std::string(kEsc) + "[?25h" + kEsc + "[?1049l");
        const LiveSize size = live_window_size(o_.fd);
        std::string text;
        for (const std::string& line : analyzer::detail::live_frame(figures, size.columns, size.rows - 1)) {
          text += line + "\n";
        }
        live_write_all(o_.fd, text);
        return;
      }
      case LiveOutput::bottom_panel:
        draw(figures);
        // The whole screen scrolls again; the cursor goes below the panel.
        live_write_all(o_.fd, std::string(kEsc) + "[r" + kEsc + "[" + std::to_string(size_.rows) + ";1H\n");
        return;
    }
  }

 private:
  std::size_t panel_rows(const LiveSize& size) const {
    // At least 4 rows of the program's own output stay above the panel.
    const std::size_t rows = std::min(o_.panel_rows, size.rows > 4 ? size.rows - 4 : 0);
    return rows >= 4 ? rows : 0;
  }
  std::string scroll_region() const {
    if (panel_ == 0) return std::string(kEsc) + "[r";
    return std::string(kEsc) + "[1;" + std::to_string(size_.rows - panel_) + "r";
  }
  static std::string line_of(const LiveFigures& figures) {
    if (figures.events == 0) return figures.state;  // no figures yet: what it waits for
    return analyzer::detail::live_line(figures);
  }

  const LiveOptions& o_;
  LiveSize size_;
  std::size_t panel_ = 0;
};

}  // namespace

bool is_live_terminal(int fd) {
  const char* term = std::getenv("TERM");
  return ::isatty(fd) == 1 && (term == nullptr || std::strcmp(term, "dumb") != 0);
}

LiveOutcome follow_live(const LiveOptions& o, LiveControl& c) {
  LiveScreen screen(o);
  screen.open();
  LiveFigures figures;
  analyzer::detail::LiveSampler sampler;
  analyzer::Analysis analysis;
  LiveOutcome outcome;
  std::uint64_t events = 0;
  Clock::time_point next_draw = Clock::now();
  Clock::time_point last_draw = next_draw;
  std::uint64_t events_at_last_draw = 0;

  const auto draw = [&](bool force) {
    const Clock::time_point now = Clock::now();
    if (!force && now < next_draw) return;
    const double seconds = std::chrono::duration<double>(now - last_draw).count();
    if (events > 0) sampler.sample(analysis, o.top, figures);
    figures.events = events;
    figures.events_per_second =
        seconds > 0.05 ? static_cast<std::uint64_t>(static_cast<double>(events - events_at_last_draw) / seconds) : 0;
    screen.draw(figures);
    last_draw = now;
    events_at_last_draw = events;
    next_draw = now + o.interval;
  };
  const auto finish = [&](LiveOutcome result) {
    if (o.stay && (result.how == LiveOutcome::How::end_line || result.how == LiveOutcome::How::writer_gone)) {
      while (!c.stop.load()) {
        draw(false);
        std::this_thread::sleep_for(o.poll);
      }
    }
    if (events > 0) sampler.sample(analysis, o.top, figures);  // the final figures
    figures.events = events;
    figures.events_per_second = 0;
    screen.close(figures);
    return result;
  };

  // The trace may not exist yet (run: until the program's first allocation).
  std::optional<std::string> path;
  figures.state = "waiting for " + c.waiting_for;
  for (;;) {
    path = c.locate();
    if (path) break;
    if (c.stop.load()) return finish({LiveOutcome::How::stopped, {}});
    if (c.program_ended.load() && !(path = c.locate())) return finish({LiveOutcome::How::no_trace, {}});
    if (path) break;
    draw(false);
    std::this_thread::sleep_for(o.poll);
  }
  figures.trace = *path;

  // At each poll at the file's end: redraw when due, and decide whether to
  // wait on. Bytes still to come after the writer's end are waited for one
  // more poll (it may have written them just before it went).
  const analyzer::TraceHeader* header = nullptr;
  analyzer::detail::ByteSource* source_view = nullptr;
  std::uint64_t last_position = 0;
  Clock::time_point idle_since = Clock::now();
  bool writer_ending = false;  // the writer looked gone (or the program ended) at the last poll
  bool stopping = false;
  LiveOutcome::How stop_how = LiveOutcome::How::stopped;
  analyzer::detail::FollowOptions follow;
  follow.poll = o.poll;
  follow.on_idle = [&]() {
    const Clock::time_point now = Clock::now();
    if (source_view != nullptr && source_view->position() != last_position) {
      last_position = source_view->position();
      idle_since = now;
      writer_ending = false;
    }
    if (c.stop.load()) {
      stopping = true;
      return false;
    }
    const bool ended = c.program_ended.load() ||
                       (header != nullptr && now - idle_since >= o.writer_gone_after && live_writer_gone(*header));
    if (ended) {
      if (writer_ending) {
        stopping = true;
        stop_how = c.program_ended.load() ? LiveOutcome::How::stopped : LiveOutcome::How::writer_gone;
        return false;
      }
      writer_ending = true;
    }
    draw(false);
    return true;
  };

  std::unique_ptr<analyzer::TraceReader> reader;
  try {
    figures.state = "waiting for the trace's first line";
    auto source = analyzer::detail::open_following_byte_source(*path, follow);
    source_view = source.get();
    analyzer::ReaderOptions reader_options;
    reader_options.complete_killed = false;  // never write to a trace being written
    reader_options.progress = false;
    reader = std::make_unique<analyzer::TraceReader>(*path, std::move(source), reader_options);
    header = &reader->header();
    figures.program = live_base_name(header->exe) + " (pid " + std::to_string(header->pid) + ")";
    figures.state = "following";
    bool end_line = false;
    while (const analyzer::TraceEvent* event = reader->next()) {
      analysis.consume(*event);
      ++events;
      if (event->ev == format::Event::end) {
        end_line = true;
        break;
      }
      if ((events & 1023) == 0) {
        if (c.stop.load()) {
          stopping = true;
          break;
        }
        draw(false);
      }
    }
    figures.bad_lines = reader->stats().bad_lines;
    if (end_line) {
      const auto& end = reader->stats().end;
      figures.state = "ended" + (end && !end->reason_text.empty() ? " (" + end->reason_text + ")" : std::string());
      return finish({LiveOutcome::How::end_line, {}});
    }
  } catch (const std::exception& e) {  // TraceError; or out of memory on a hostile file
    if (!stopping) {
      figures.state = "unreadable";
      return finish({LiveOutcome::How::unreadable, e.what()});
    }
  }
  if (stop_how == LiveOutcome::How::writer_gone) {
    figures.state = "writer gone (pid " + std::to_string(header != nullptr ? header->pid : 0) + "), no end line";
  } else if (c.program_ended.load()) {
    figures.state = "program ended, no end line";
  } else {
    figures.state = "stopped";
  }
  return finish({stop_how, {}});
}

LiveRun::LiveRun(LiveOptions options, std::function<std::optional<std::string>()> locate, std::string waiting_for)
    : options_(std::move(options)) {
  control_.locate = std::move(locate);
  control_.waiting_for = std::move(waiting_for);
  thread_ = std::thread([this] {
    try {
      const LiveOutcome outcome = follow_live(options_, control_);
      if (outcome.how == LiveOutcome::How::unreadable) {
        live_write_all(STDERR_FILENO, "cumemtrace: live view: " + outcome.message + "\n");
      }
    } catch (const std::exception&) {
      // Out of memory in the view: the run itself goes on undisturbed.
    }
  });
}

LiveRun::~LiveRun() { program_ended(); }

void LiveRun::program_ended() {
  control_.program_ended = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace cumemtrace::cli
