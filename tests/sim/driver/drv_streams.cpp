// Streams and events. Every stream is a worker thread running its queue in
// order. Legacy default stream semantics are modelled with dependencies
// added at enqueue time (CUDA Runtime API, "Stream synchronization
// behavior"): work on the legacy stream waits for all earlier work on the
// blocking streams of its context, and later work on a blocking stream waits
// for the legacy stream. CU_STREAM_NON_BLOCKING streams take no part.
#include <pthread.h>
#include <signal.h>

#include <new>
#include <system_error>
#include <thread>

#include "drv_graph.h"

namespace sim {

void Stream::wait_for(std::uint64_t seq) {
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return completed >= seq; });
}

bool Stream::is_done(std::uint64_t seq) {
  std::lock_guard<std::mutex> lk(mu);
  return completed >= seq;
}

namespace {

void worker_main(std::shared_ptr<Stream> s) {
  const std::uint64_t latency = simcfg::get().async_latency_us;
  simcfg::lower_timer_slack();  // the "slow kernel" sleeps end on time
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lk(s->mu);
      s->cv.wait(lk, [&] { return !s->queue.empty() || s->stopping; });
      if (s->queue.empty()) break;  // stopping, and everything ran
      op = std::move(s->queue.front());
      s->queue.pop_front();
    }
    for (auto& dep : op.deps) dep.first->wait_for(dep.second);
    op.deps.clear();
    if (op.pays_latency) simcfg::sleep_us(latency);  // the "slow kernel"
    if (op.fn) op.fn();
    op.fn = nullptr;
    {
      std::lock_guard<std::mutex> lk(s->mu);
      ++s->completed;
    }
    s->cv.notify_all();
  }
  Context* c = s->ctx;
  {
    std::lock_guard<std::mutex> lk(c->mu);
    c->streams.erase(s.get());
  }
  c->cv.notify_all();
}

// Creates a stream and its worker. Caller must NOT hold ctx->mu.
CUresult make_stream(Context* c, unsigned flags, int priority, bool legacy, bool per_thread,
                     std::shared_ptr<Stream>* out) {
  auto s = std::make_shared<Stream>();
  s->ctx = c;
  s->ctx_generation = c->generation.load();
  s->flags = flags;
  s->priority = priority;
  s->is_legacy = legacy;
  s->is_per_thread = per_thread;
  s->id = G().next_stream_id.fetch_add(1);
  {
    std::lock_guard<std::mutex> lk(c->mu);
    c->streams.insert(s.get());
  }
  // The worker is the device, not a thread of the program: it starts with
  // every signal blocked, so a process-directed signal (kill, Ctrl-C) still
  // runs the program's handler on one of the program's own threads, where a
  // loop such as "while (!flag) sigsuspend()" waits for it. A worker that
  // took the signal instead left that loop asleep forever (seen under TSan,
  // which delays handlers to its own safe points).
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  CUresult started = CUDA_SUCCESS;
  try {
    std::thread(worker_main, s).detach();
  } catch (const std::system_error&) {
    started = CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (started != CUDA_SUCCESS) {
    std::lock_guard<std::mutex> lk(c->mu);
    c->streams.erase(s.get());
    return started;
  }
  *out = std::move(s);
  return CUDA_SUCCESS;
}

void stop_stream(const std::shared_ptr<Stream>& s) {
  {
    std::lock_guard<std::mutex> lk(s->mu);
    s->stopping = true;
  }
  s->cv.notify_all();
}

// The per-thread default stream of each context this thread used. It is
// stopped (after draining) when the thread exits. Not in a forked child that
// exits: the thread that forked runs this at exit() there, but the streams
// are the parent's, their workers did not survive the fork and their locks
// and condition variables may have been caught mid-operation by it (a
// notify then waits forever for a waiter that no longer exists: found by
// tests/apps/soak). Like the rest of the parent's state, they are left alone.
struct PerThreadStreams {
  std::unordered_map<Context*, std::shared_ptr<Stream>> map;
  ~PerThreadStreams() {
    if (g_forked_child.load(std::memory_order_relaxed)) {
      (void)new decltype(map)(std::move(map));  // leaked: nothing of the parent's is touched
      return;
    }
    for (auto& e : map) stop_stream(e.second);
  }
};
thread_local PerThreadStreams tl_pts;

CUresult legacy_stream(Context* c, std::shared_ptr<Stream>* out) {
  {
    std::lock_guard<std::mutex> lk(c->mu);
    if (c->legacy) {
      *out = c->legacy;
      return CUDA_SUCCESS;
    }
  }
  std::shared_ptr<Stream> s;
  if (CUresult r = make_stream(c, 0, 0, true, false, &s)) return r;
  std::lock_guard<std::mutex> lk(c->mu);
  if (c->legacy) {  // another thread won the race
    stop_stream(s);
  } else {
    c->legacy = s;
  }
  *out = c->legacy;
  return CUDA_SUCCESS;
}

CUresult per_thread_stream(Context* c, std::shared_ptr<Stream>* out) {
  auto it = tl_pts.map.find(c);
  if (it != tl_pts.map.end()) {
    if (it->second->ctx_generation == c->generation.load()) {
      *out = it->second;
      return CUDA_SUCCESS;
    }
    stop_stream(it->second);  // the context was reset since
    tl_pts.map.erase(it);
  }
  std::shared_ptr<Stream> s;
  if (CUresult r = make_stream(c, 0, 0, false, true, &s)) return r;
  tl_pts.map[c] = s;
  *out = s;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult resolve_stream(CUstream h, bool per_thread, std::shared_ptr<Stream>* out) {
  if (h == nullptr) h = per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  if (h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    Context* c = nullptr;
    if (CUresult r = current_ctx(&c)) return r;
    return h == CU_STREAM_LEGACY ? legacy_stream(c, out) : per_thread_stream(c, out);
  }
  if (CUresult r = check_init()) return r;
  {
    std::lock_guard<std::mutex> lk(G().mu);
    auto it = G().streams.find(h);
    if (it == G().streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    *out = it->second;
  }
  // A stream's context's device fault is sticky like the current one's.
  return ctx_fault((*out)->ctx);
}

std::uint64_t enqueue(const std::shared_ptr<Stream>& s, Op op, bool* behind) {
  Context* c = s->ctx;
  std::lock_guard<std::mutex> ctx_lk(c->mu);  // orders enqueues within the context
  if (s->is_legacy) {
    for (Stream* b : c->streams) {
      if (b == s.get() || !b->blocking()) continue;
      std::lock_guard<std::mutex> lk(b->mu);
      if (b->submitted > b->completed) op.deps.emplace_back(b->shared_from_this(), b->submitted);
    }
  } else if (s->blocking() && c->legacy) {
    Stream* l = c->legacy.get();
    std::lock_guard<std::mutex> lk(l->mu);
    if (l->submitted > l->completed) op.deps.emplace_back(c->legacy, l->submitted);
  }
  if (op.bookkeeping) {
    std::erase_if(op.deps, [](const auto& dep) { return dep.first->is_done(dep.second); });
  }
  const bool has_deps = !op.deps.empty();
  std::uint64_t seq;
  bool now = false;
  {
    std::lock_guard<std::mutex> lk(s->mu);
    if (behind) *behind = has_deps || s->submitted > s->completed;
    seq = ++s->submitted;
    now = op.bookkeeping && !has_deps && s->queue.empty() && s->completed + 1 == seq;
    if (!now) s->queue.push_back(std::move(op));
  }
  if (now) {
    // Still under the context's lock, so no other enqueue comes between.
    if (op.fn) op.fn();
    std::lock_guard<std::mutex> lk(s->mu);
    ++s->completed;
  }
  s->cv.notify_all();
  return seq;
}

CUresult run_sync(const std::shared_ptr<Stream>& s, std::function<void()> fn, bool pays_latency) {
  // A synchronous call cannot be captured (drv_capture.cpp).
  if (CUresult r = capture_forbids_wait(s.get())) return r;
  Op op;
  op.fn = std::move(fn);
  op.pays_latency = pays_latency;
  bool behind = false;
  std::uint64_t seq = enqueue(s, std::move(op), &behind);
  HostWait wait(behind);
  s->wait_for(seq);
  return ctx_fault(s->ctx);
}

CUresult sync_context(Context* ctx) {
  std::vector<std::pair<std::shared_ptr<Stream>, std::uint64_t>> waits;
  {
    std::lock_guard<std::mutex> ctx_lk(ctx->mu);
    for (Stream* s : ctx->streams) {
      std::lock_guard<std::mutex> lk(s->mu);
      if (s->submitted > s->completed) waits.emplace_back(s->shared_from_this(), s->submitted);
    }
  }
  HostWait wait(!waits.empty());
  for (auto& w : waits) w.first->wait_for(w.second);
  return ctx_fault(ctx);
}

void stop_context_streams(Context* ctx) {
  std::vector<std::shared_ptr<Stream>> stopping;
  {
    std::lock_guard<std::mutex> lk(G().mu);
    for (auto it = G().streams.begin(); it != G().streams.end();) {
      if (it->second->ctx == ctx) {
        stopping.push_back(it->second);
        it = G().streams.erase(it);
      } else {
        ++it;
      }
    }
  }
  {
    std::lock_guard<std::mutex> lk(ctx->mu);
    for (Stream* s : ctx->streams) stopping.push_back(s->shared_from_this());
    ctx->legacy.reset();
  }
  for (auto& s : stopping) stop_stream(s);
  stopping.clear();
  std::unique_lock<std::mutex> lk(ctx->mu);
  ctx->cv.wait(lk, [&] { return ctx->streams.empty(); });
}

void drop_context_events(Context* ctx) {
  drop_context_modules(ctx);  // its modules' globals go with it (drv_module.cpp)
  std::lock_guard<std::mutex> lk(G().mu);
  for (auto it = G().events.begin(); it != G().events.end();) {
    if (it->second->ctx == ctx) {
      it = G().events.erase(it);
    } else {
      ++it;
    }
  }
}

namespace {

CUresult find_event(CUevent h, std::shared_ptr<Event>* out) {
  if (CUresult r = check_init()) return r;
  {
    std::lock_guard<std::mutex> lk(G().mu);
    auto it = G().events.find(h);
    if (it == G().events.end()) return CUDA_ERROR_INVALID_HANDLE;
    *out = it->second;
  }
  return ctx_fault((*out)->ctx);  // sticky, as for streams
}

CUresult stream_sync(CUstream h, bool pt) {
  count(Counter::stream_synchronize);
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  if (CUresult r = capture_forbids_wait(s.get())) return r;
  if (s->is_legacy) {
    // A marker on the legacy stream depends on all earlier blocking work,
    // so waiting for it is the implicit barrier of the NULL stream.
    return run_sync(s, nullptr, false);
  }
  std::uint64_t seq;
  bool outstanding;
  {
    std::lock_guard<std::mutex> lk(s->mu);
    seq = s->submitted;
    outstanding = s->completed < seq;
  }
  HostWait wait(outstanding);
  s->wait_for(seq);
  return ctx_fault(s->ctx);
}

CUresult stream_query(CUstream h, bool pt) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  if (CUresult r = capture_forbids_wait(s.get())) return r;
  std::lock_guard<std::mutex> lk(s->mu);
  return s->completed >= s->submitted ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult stream_wait_event(CUstream h, CUevent ev, unsigned flags, bool pt) {
  count(Counter::stream_wait_event);
  if (flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  std::shared_ptr<Event> e;
  if (CUresult r = find_event(ev, &e)) return r;
  bool captured = false;
  if (CUresult r = capture_event_wait(s, e, &captured); captured) return charged(Cost::StreamWaitEvent, 0, r);
  Op op;
  {
    std::lock_guard<std::mutex> lk(e->mu);
    // Waiting on a never-recorded event is a no-op (it counts as complete).
    if (!e->recorded) return charged(Cost::StreamWaitEvent, 0, CUDA_SUCCESS);
    op.deps.emplace_back(e->stream, e->seq);
  }
  op.bookkeeping = true;
  enqueue(s, std::move(op));
  return charged(Cost::StreamWaitEvent, 0, CUDA_SUCCESS);
}

CUresult record(CUevent ev, CUstream h, unsigned flags, bool pt) {
  if (flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Event> e;
  if (CUresult r = find_event(ev, &e)) return r;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  bool captured = false;
  if (CUresult r = capture_event_record(e, s, &captured); captured) return r;
  std::uint64_t gen;
  {
    std::lock_guard<std::mutex> lk(e->mu);
    gen = ++e->gen;
    e->done_stamp = false;
  }
  Op op;
  op.bookkeeping = true;
  op.fn = [e, gen] {
    std::lock_guard<std::mutex> lk(e->mu);
    if (e->gen == gen) {
      e->stamp_ms = now_ms();
      e->done_stamp = true;
    }
  };
  std::uint64_t seq = enqueue(s, std::move(op));
  std::lock_guard<std::mutex> lk(e->mu);
  if (e->gen == gen) {
    e->stream = s;
    e->seq = seq;
    e->recorded = true;
  }
  return CUDA_SUCCESS;
}

CUresult event_record(CUevent ev, CUstream h, unsigned flags, bool pt) {
  count(Counter::event_record);
  return charged(Cost::EventRecord, 0, record(ev, h, flags, pt));
}

CUresult launch_host(CUstream h, CUhostFn fn, void* data, bool pt) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  Op op;
  op.fn = [fn, data] { fn(data); };
  op.pays_latency = true;
  return submit(s, std::move(op), NodeKind::Host);
}

CUresult add_callback(CUstream h, CUstreamCallback cb, void* data, unsigned flags, bool pt) {
  if (!cb || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  Op op;
  op.fn = [cb, h, data] { cb(h, CUDA_SUCCESS, data); };
  op.pays_latency = true;
  return submit(s, std::move(op), NodeKind::Host);
}

CUresult stream_create(CUstream* ph, unsigned flags, int priority) {
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  std::shared_ptr<Stream> s;
  if (CUresult r = make_stream(c, flags, priority, false, false, &s)) return r;
  {
    std::lock_guard<std::mutex> lk(G().mu);
    G().streams[s.get()] = s;
  }
  *ph = reinterpret_cast<CUstream>(s.get());
  return CUDA_SUCCESS;
}

CUresult stream_destroy(CUstream h) {
  if (CUresult r = check_init()) return r;
  std::shared_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> lk(G().mu);
    auto it = G().streams.find(h);
    if (it == G().streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    s = it->second;
    G().streams.erase(it);
  }
  // "In case the device is still doing work in the stream hStream when
  //  cuStreamDestroy() is called, the function will return immediately and
  //  the resources associated with hStream will be released automatically
  //  once the device has completed all work in hStream."
  stop_stream(s);
  return CUDA_SUCCESS;
}

template <typename F>
CUresult with_stream(CUstream h, bool pt, F f) {
  std::shared_ptr<Stream> s;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  return f(*s);
}

CUresult destroy_event(CUevent ev) {
  count(Counter::event_destroy);
  if (CUresult r = check_init()) return r;
  bool erased;
  {
    std::lock_guard<std::mutex> lk(G().mu);
    // Pending record operations keep their own reference, so destroying an
    // event with work outstanding is safe, as in real CUDA.
    erased = G().events.erase(ev) != 0;
  }
  return charged(Cost::EventDestroy, 0, erased ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

CUresult elapsed(float* ms, CUevent a, CUevent b) {
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Event> ea, eb;
  if (CUresult r = find_event(a, &ea)) return r;
  if (CUresult r = find_event(b, &eb)) return r;
  double ta = 0, tb = 0;
  for (auto* p : {&ea, &eb}) {
    Event& e = **p;
    std::lock_guard<std::mutex> lk(e.mu);
    if ((e.flags & CU_EVENT_DISABLE_TIMING) || !e.recorded) return CUDA_ERROR_INVALID_HANDLE;
    if (!e.done_stamp) return CUDA_ERROR_NOT_READY;
    (p == &ea ? ta : tb) = e.stamp_ms;
  }
  *ms = static_cast<float>(tb - ta);
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace sim

using namespace sim;

CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  return stream_create(phStream, Flags, 0);
}
CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  // Priorities are accepted and reported back; the sim has no scheduler.
  if (priority > 0) priority = 0;
  if (priority < -5) priority = -5;
  return stream_create(phStream, flags, priority);
}
CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) { return stream_destroy(hStream); }
CUresult CUDAAPI cuStreamDestroy(CUstream hStream) { return stream_destroy(hStream); }
CUresult CUDAAPI cuStreamSynchronize(CUstream h) { return stream_sync(h, false); }
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream h) { return stream_sync(h, true); }
CUresult CUDAAPI cuStreamQuery(CUstream h) { return stream_query(h, false); }
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream h) { return stream_query(h, true); }
CUresult CUDAAPI cuStreamWaitEvent(CUstream h, CUevent e, unsigned int f) {
  return stream_wait_event(h, e, f, false);
}
CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int f) {
  return stream_wait_event(h, e, f, true);
}
CUresult CUDAAPI cuLaunchHostFunc(CUstream h, CUhostFn fn, void* d) {
  return launch_host(h, fn, d, false);
}
CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void* d) {
  return launch_host(h, fn, d, true);
}
CUresult CUDAAPI cuStreamAddCallback(CUstream h, CUstreamCallback cb, void* d, unsigned int f) {
  return add_callback(h, cb, d, f, false);
}
CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback cb, void* d,
                                          unsigned int f) {
  return add_callback(h, cb, d, f, true);
}

#define SIM_STREAM_GETTER(NAME, PT, TYPE, EXPR)        \
  CUresult CUDAAPI NAME(CUstream h, TYPE* out) {       \
    if (!out) return CUDA_ERROR_INVALID_VALUE;         \
    return with_stream(h, PT, [&](Stream& s) {         \
      *out = EXPR;                                     \
      return CUDA_SUCCESS;                             \
    });                                                \
  }
SIM_STREAM_GETTER(cuStreamGetFlags, false, unsigned int, s.flags)
SIM_STREAM_GETTER(cuStreamGetFlags_ptsz, true, unsigned int, s.flags)
SIM_STREAM_GETTER(cuStreamGetPriority, false, int, s.priority)
SIM_STREAM_GETTER(cuStreamGetPriority_ptsz, true, int, s.priority)
SIM_STREAM_GETTER(cuStreamGetId, false, unsigned long long, s.id)
SIM_STREAM_GETTER(cuStreamGetId_ptsz, true, unsigned long long, s.id)
SIM_STREAM_GETTER(cuStreamGetCtx, false, CUcontext, reinterpret_cast<CUcontext>(s.ctx))
SIM_STREAM_GETTER(cuStreamGetCtx_ptsz, true, CUcontext, reinterpret_cast<CUcontext>(s.ctx))
SIM_STREAM_GETTER(cuStreamGetDevice, false, CUdevice, s.ctx->dev->ordinal)
SIM_STREAM_GETTER(cuStreamGetDevice_ptsz, true, CUdevice, s.ctx->dev->ordinal)
#undef SIM_STREAM_GETTER

static CUresult event_create(CUevent* phEvent, unsigned int Flags) {
  if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
  const unsigned all = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (Flags & ~all) return CUDA_ERROR_INVALID_VALUE;
  // Interprocess events must also disable timing (cuEventCreate docs).
  if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  auto e = std::make_shared<Event>();
  e->flags = Flags;
  e->ctx = c;
  std::lock_guard<std::mutex> lk(G().mu);
  G().events[e.get()] = e;
  *phEvent = reinterpret_cast<CUevent>(e.get());
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  count(Counter::event_create);
  return charged(Cost::EventCreate, 0, event_create(phEvent, Flags));
}
CUresult CUDAAPI cuEventRecord(CUevent e, CUstream h) { return event_record(e, h, 0, false); }
CUresult CUDAAPI cuEventRecord_ptsz(CUevent e, CUstream h) { return event_record(e, h, 0, true); }
CUresult CUDAAPI cuEventRecordWithFlags(CUevent e, CUstream h, unsigned int f) {
  return event_record(e, h, f, false);
}
CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent e, CUstream h, unsigned int f) {
  return event_record(e, h, f, true);
}
namespace {
// Where the event's last record sits: its stream and position there. False
// for an event never recorded, which counts as complete.
bool recorded_point(Event& e, std::shared_ptr<Stream>* stream, std::uint64_t* seq) {
  std::lock_guard<std::mutex> lk(e.mu);
  if (!e.recorded) return false;
  *stream = e.stream;
  *seq = e.seq;
  return true;
}
}  // namespace

static CUresult event_query(CUevent ev) {
  std::shared_ptr<Event> e;
  if (CUresult r = find_event(ev, &e)) return r;
  if (CUresult r = capture_check_event_use(e.get())) return r;
  std::shared_ptr<Stream> s;
  std::uint64_t seq = 0;
  if (!recorded_point(*e, &s, &seq)) return CUDA_SUCCESS;
  return s->is_done(seq) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
// A query costs the host its time whatever the answer.
CUresult CUDAAPI cuEventQuery(CUevent ev) {
  count(Counter::event_query);
  const CUresult r = event_query(ev);
  if (r == CUDA_ERROR_NOT_READY) charge(Cost::EventQuery);
  return charged(Cost::EventQuery, 0, r);
}
CUresult CUDAAPI cuEventSynchronize(CUevent ev) {
  count(Counter::event_synchronize);
  std::shared_ptr<Event> e;
  if (CUresult r = find_event(ev, &e)) return r;
  if (CUresult r = capture_check_event_use(e.get())) return r;
  std::shared_ptr<Stream> s;
  std::uint64_t seq = 0;
  const bool recorded = recorded_point(*e, &s, &seq);
  HostWait wait(recorded && !s->is_done(seq));
  if (recorded) {
    s->wait_for(seq);
    return ctx_fault(s->ctx);
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy_v2(CUevent e) { return destroy_event(e); }
CUresult CUDAAPI cuEventDestroy(CUevent e) { return destroy_event(e); }
CUresult CUDAAPI cuEventElapsedTime_v2(float* ms, CUevent a, CUevent b) { return elapsed(ms, a, b); }
CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent a, CUevent b) { return elapsed(ms, a, b); }
