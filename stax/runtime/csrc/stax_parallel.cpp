// The kernels' OpenMP runtime: the part of libgomp's ABI that GCC lowers the kernels' constructs
// to (section 8.5's `#pragma omp parallel`, `omp for schedule(dynamic, k)`, `omp barrier`,
// `omp single`), on one process-wide pool of threads that spin before they sleep, and that
// never makes a region wait for a thread that has not started it.  The kernels are linked with
// `--wrap` for these symbols (runtime.PARALLEL_ENTRY_POINTS), so they call the `__wrap_`
// functions below and never libgomp; other libraries of the process keep libgomp.
//
// Why a pool: libgomp calls futex wake at both barriers of every region even when its threads
// spin (experiments.bench_regions times an empty region on both runtimes).
// Why chunks claimed dynamically: with a static schedule a region hands half its iterations to a
// pool thread, and when another process runs on that thread's core the caller waits until the
// thread is scheduled again (milliseconds).  Here each worksharing loop is cut into chunks
// (Algorithm 8.1's schedule in cpp.py decides the chunk size from the team's size) that the
// threads claim from a shared counter, so the caller takes back every chunk a late thread has not
// claimed, and a pool thread that wakes after the region is over returns at once.  A claim takes
// 1/team of the chunks left, at least one (a guided schedule over Algorithm 8.1's chunks): each
// claim moves the counter's cache line between cores, and a small region pays for every move.
// A static schedule cannot do this: GCC lowers it inline, each thread computing its share from
// omp_get_num_threads(), so that share is lost unless its thread runs.  `schedule(dynamic, k)`
// is lowered to GOMP_loop_nonmonotonic_dynamic_start/next, which the pool implements; emitting
// our own claim loop instead would duplicate GCC's collapse and bounds arithmetic in cpp.py.
//
// A region: the caller owns the pool (one region at a time), publishes the region's number to
// the pool threads of its team, then runs the region's function itself.  A pool thread joins by
// a compare-and-swap on the region's `members` word (region number, CLOSED bit, threads inside);
// it fails once the caller has closed the region, and the thread then goes back to waiting.
// Worksharing constructs are numbered per thread in the order it meets them (every thread runs
// the same code, so step j is the same loop or single on every thread).  Step j's chunks are
// claimed from claim word j % STEPS = (j + 1) << 32 | next unclaimed chunk; the first thread to
// claim in the step sets it.  A barrier waits for chunks, not threads: every thread adds the
// chunks it ran to `done` when it reaches a barrier or leaves, and a barrier after step j waits
// until `done` counts every chunk of steps 0..j (each thread knows that number from the loops it
// met).
//
// Why the hand-back is safe (the code marks where it relies on (1)-(4)):
// (1) No chunk runs twice: chunks c .. c + t - 1 are run by the thread whose compare-and-swap
//     moved the claim word from (j + 1, c) to (j + 1, c + t) (from an earlier step's value for
//     c = 0); a word moves only forward, so each (j, c) is passed by one CAS.  A thread at step j
//     that finds a later step (> j + 1) in the slot takes nothing: that slot was reset for step
//     j + k*STEPS only by a thread that had passed step j, which it leaves only when its claim
//     fails, i.e. when every chunk of step j was claimed (or when it found a later step there: by
//     induction over the resets, the same).  So the ring never hands a step's slot to a later step
//     while a chunk of it is unclaimed, and a slow thread never claims a later step's chunk for
//     step j.
// (2) No chunk is lost: the caller runs the region's function to its end, so it meets every step
//     and claims until each step's claim fails, i.e. until every chunk is claimed by someone;
//     a claimed chunk is run by its claimer, which is inside the function (a member), and the
//     caller returns only after every member has left (4).
// (3) Barriers keep their meaning: a chunk of a step after a barrier is claimed only by a thread
//     that passed that barrier, and it passed only when `done` counted every chunk of the steps
//     before it.  Chunks are added to `done` after they ran (release), only at a barrier or on
//     leaving, and chunks of later steps are added only by threads that passed the barrier, so
//     `done` >= expected means every chunk before the barrier has run and its writes (a fenced
//     block's non-temporal stores included: its fence precedes the thread's next barrier) are
//     visible (acquire).  A barrier never waits for a thread that did not join, nor for one that
//     joined but holds no chunk: it waits only for claimed chunks, so the "team" of a barrier is
//     whoever claimed work before it.  `omp single` is a step of one chunk; `omp single`'s
//     implicit barrier then waits for the thread that ran it.
// (4) No thread touches a region's data after the caller returns: a pool thread reads the
//     region's function and data only after it joined, and the caller, after its own run, sets
//     CLOSED and waits until no member is left; a thread that joins later fails its CAS (the
//     region number or CLOSED differs) and returns to waiting without reading either.  Claim
//     words and `done` are reset for the next region only while no member exists.
//
// A region that is one loop (`omp parallel for`, which GCC lowers to GOMP_parallel_loop_*) starts
// every member in that loop as step 0.
//
// A member that loses its core while it holds a chunk delays the region's end by the time it is
// away (the caller cannot run a claimed chunk again: it may have written half its outputs), and so
// does one that joined and holds none (it reads the region's data until it leaves, (4)).  The
// straggler rule bounds how often: the caller times its waits (at barriers and at the end), and
// when it waited longer than it worked (and longer than STRAGGLER_FLOOR_SECONDS) on pool threads
// that took over STRAGGLER_SLOWDOWN times its own time a chunk (a thread that only had more chunks,
// an uneven split, ran at the caller's pace), the regions of the next SOLO_MIN_SECONDS run on their
// caller alone, as a team of one (the pool untouched, so (1)-(4) hold trivially), longer after a
// longer wait; on a crowded machine (more runnable tasks than CPUs) the window grows while the
// pool, tried again, fails within SOLO_MEMORY_SECONDS, up to SOLO_MAX_SECONDS, and otherwise (a
// moment's interruption) it stays short; the first region after it tries the pool again.  The
// rule changes which regions use the pool, never how a pooled region runs.  A caller waiting longer than it
// worked stops spinning and, before it sleeps, lends its core to the pool threads still inside the
// region: it pins them to its core, where they run at once instead of queueing behind another task
// on theirs, and gives them their own affinity back after its wait (lend_core, take_core_back).
//
// Code that asks for its team (omp_get_num_threads / omp_get_thread_num: a static schedule, as
// hand-written loops of the benchmarks have) needs every thread it planned for: such a region
// waits at its end for every pool thread it handed itself to (libgomp's behaviour), and a barrier
// after such a query is refused (abort with a message), since the pool's barriers count chunks.
//
// A region that finds the pool taken (by another thread of the process, or nested in a region)
// runs on its calling thread alone, a team of one; a worksharing loop outside a pooled region
// (orphaned, or in such a region) is one chunk on its thread.  A thread waits by spinning
// SPIN_SECONDS (yielding its core between checks after YIELD_AFTER_SECONDS), then sleeps on a
// futex, which the waking side calls only when someone sleeps.
// With more threads than CPUs, or under OMP_WAIT_POLICY=passive, nothing spins.  A forked child
// starts with no pool threads.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <strings.h>
#include <new>
#include <random>
#include <thread>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <x86intrin.h>
#endif

namespace stax_parallel {

double spin_seconds() {  // about what libgomp spins by default before it sleeps
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return policy != nullptr && strcasecmp(policy, "passive") == 0 ? 0 : 3e-4;
}
const double SPIN_SECONDS = spin_seconds();
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// The straggler rule's clock inside a region: the time-stamp counter where there is one (a few
// cycles to read, where the steady clock costs tens of nanoseconds in every region).
inline int64_t ticks() {
#if defined(__x86_64__) || defined(__i386__)
  return int64_t(__rdtsc());
#else
  return now_ns();
#endif
}
// A wait longer than this yields the core between its checks: the thread it waits for (or the
// caller a pool thread waits for) may be runnable on this core, behind the spinning thread.
const double YIELD_AFTER_SECONDS = 2e-5;
std::atomic<int64_t> sleeps{0};  // waits that ended asleep
const int MAX_TEAM = 256;
const unsigned CPUS = std::thread::hardware_concurrency();  // online CPUs, 0 if unknown (read once: a file)
// The straggler rule: a region whose caller waited for pool threads longer than it worked (and
// longer than STRAGGLER_FLOOR_SECONDS), on members that took over STRAGGLER_SLOWDOWN times the
// caller's time a chunk, had a member that lost its core; the regions of the next SOLO_PER_WAIT
// times the wait run on their caller alone.  On a crowded machine (solo_window) the window is at
// least SOLO_MIN_SECONDS and grows SOLO_GROWTH-fold (up to SOLO_MAX_SECONDS) while the next
// straggler comes within SOLO_MEMORY_SECONDS of the last window's end: under a lasting co-runner
// (which lets the pool run for a while between its stalls) a stall of a time slice opens a window
// of 0.15 s, and the pool is then tried about twice a second, so the stalls fall on few calls; a
// straggler on an uncrowded machine (a late wake-up, a core taken for a moment by the host) costs
// one window of at most SOLO_MIN_SECONDS.
const double STRAGGLER_FLOOR_SECONDS = 2e-5, STRAGGLER_SLOWDOWN = 4;
const double SOLO_MIN_SECONDS = 1e-2, SOLO_MAX_SECONDS = 0.5, SOLO_MEMORY_SECONDS = 1, SOLO_PER_WAIT = 50;
const int64_t SOLO_GROWTH = 4;
const uint32_t STEPS = 64;                   // claim words: steps a slow member may lag behind
const uint64_t MAX_CHUNKS = uint64_t(1) << 31;  // chunks of one loop (the claim word's low half)
const uint64_t CLOSED = uint64_t(1) << 31;      // in `members`: no thread may join any more

// Set once a library of 512-bit kernels is loaded (stax_parallel_vector_bits): a waiting thread
// then runs one 512-bit multiply-add a pause.  A core that has not run 512-bit instructions for a
// while runs its first ones slowly (the upper lanes' power-up and the frequency license): a pool
// thread that spun between regions met that in its first chunk, and its caller waited on it
// (experiments.bench_contention's small rows).
std::atomic<bool> warm_512{false};
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void run_512() {
  __m512 v = _mm512_set1_ps(1.0f);
  asm volatile("vfmadd231ps %0, %0, %0" : "+v"(v));  // kept: the register is the asm's output
}
#endif

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
#if defined(__x86_64__)
  if (warm_512.load(std::memory_order_relaxed)) run_512();
#endif
}

void futex(void* word, int op, uint32_t value) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, nullptr, nullptr, 0);
}

// A word threads wait on, and the count of those asleep on it.  A sleeper sleeps on the low 32
// bits (little-endian x86-64), so every change a waiter waits for changes them.  A sleeper counts
// itself before it reads the value and a writer reads the count after it writes the value (both
// sequentially consistent): either the sleeper sees the new value or it is woken.
struct Nothing {
  void operator()() const {}
};

template <typename T>
struct Word {
  std::atomic<T> value{0};
  std::atomic<uint32_t> sleepers{0};

  // Wait until ready(value): spin up to `most` seconds (when `spin`), call before_sleep(), then sleep.
  template <typename Ready, typename BeforeSleep = Nothing>
  void wait_until(Ready ready, bool spin, double most = SPIN_SECONDS, BeforeSleep before_sleep = {}) {
    if (ready(value.load(std::memory_order_acquire))) return;
    if (spin && SPIN_SECONDS > 0) {  // the clock is first read after a while: most waits end before
      std::chrono::steady_clock::time_point start;
      for (uint32_t i = 1;; ++i) {
        if (ready(value.load(std::memory_order_acquire))) return;
        cpu_relax();
        if (i % 256 == 0) {
          const auto now = std::chrono::steady_clock::now();
          if (i == 256) start = now;
          const double waited = std::chrono::duration<double>(now - start).count();
          if (waited > most) break;
          if (waited > YIELD_AFTER_SECONDS) sched_yield();  // the awaited thread may need this core
        }
      }
      before_sleep();
    }
    sleeps.fetch_add(1, std::memory_order_relaxed);
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    for (T v; !ready(v = value.load(std::memory_order_seq_cst));)
      futex(&value, FUTEX_WAIT_PRIVATE, uint32_t(v));
    sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
  void wait_while(T old, bool spin) { wait_until([old](T v) { return v != old; }, spin); }
  void wake() {
    if (sleepers.load(std::memory_order_seq_cst) > 0) futex(&value, FUTEX_WAKE_PRIVATE, INT_MAX);
  }
  void publish(T next) { value.store(next, std::memory_order_seq_cst); wake(); }
  T add(T k) { const T old = value.fetch_add(k, std::memory_order_seq_cst); wake(); return old; }
};

// What the caller hands one pool thread: the number of the region to try to join.
struct alignas(64) Slot {
  Word<uint32_t> start;
  int tid = 0;
  std::atomic<pid_t> os_tid{0};      // the thread's id, for its affinity (0 until it starts)
  cpu_set_t home;                    // its affinity when it started: where a lent core gives it back
  std::atomic<uint32_t> inside{0};   // the number of the region it is inside, 0 between regions
};

struct alignas(64) Claim { std::atomic<uint64_t> word{0}; };  // (step + 1) << 32 | next chunk

// A region's first worksharing loop, when GCC combined the two (`omp parallel` around one `omp for`).
struct Loop {
  bool combined = false;
  long start = 0, end = 0, incr = 1, chunk = 1;
};

// The pool's current region; its fields are written by the caller while no member exists.
struct Region {
  void (*fn)(void*) = nullptr;
  void* data = nullptr;
  int size = 1;
  bool spin = true;
  std::atomic<bool> whole_team{false};      // the code asked for its team: wait for all of it
  Loop loop;                                // GOMP_parallel_loop_*: the region starts in this loop
  alignas(64) Word<uint64_t> members;       // region number << 32 | CLOSED | joined << 16 | inside
  alignas(64) Word<uint64_t> done;          // chunks run and counted (at barriers and on leaving)
  std::atomic<int64_t> member_ticks{0};     // pool threads' time inside, less their barrier waits
  Claim claims[STEPS];
};

struct Pool {
  std::atomic_flag busy = ATOMIC_FLAG_INIT;
  int threads = 0;  // pool threads started (team members 1 .. threads)
  Slot* slots[MAX_TEAM] = {};
  uint32_t number = 0;  // regions handed to the pool so far
  uint32_t used = 0;    // claim words the last region set
  Region region;
  std::atomic<int64_t> pooled{0}, alone{0};  // regions run on the pool, and on their caller alone
  std::atomic<int64_t> taken_back{0};        // chunks the caller ran beyond its even share
  std::atomic<int64_t> late{0};              // handed regions that were over when a thread woke
  std::atomic<int64_t> shared{0};            // chunks run by pool threads
  std::atomic<int64_t> stragglers{0};        // regions whose caller waited on a straggler (is_straggler)
  std::atomic<int64_t> solo{0};              // regions run on their caller alone by the straggler rule
  std::atomic<int64_t> lent{0};              // waits in which the caller lent its core (lend_core)
  int borrowers[MAX_TEAM] = {};              // team members holding the caller's core, and how many
  int borrowing = 0;
  // The straggler rule's state (steady clock, ns), read and written only by the pool's holder,
  // and both clocks at its first pooled region (ticks are converted over the time since).
  // solo_until: the current window's end (0 once the pool is tried again); window_end: the last one's.
  int64_t solo_until = 0, solo_ns = 0, window_end = 0, first_ns = 0, first_ticks = 0;
  // Test hooks, on lines of their own (pool threads read them in every region).
  alignas(64) Word<uint32_t> hold;           // pool threads wait before joining
  std::atomic<int64_t> delay_us{0};          // random delay before joining, up to this
  std::atomic<int64_t> stall_us{0};          // the next pool thread to claim chunks sleeps this long
  std::atomic<bool> straggler_rule{true};    // off: every region with a team uses the pool
};

Pool pool;

// What a thread knows of the region it runs: the step it is at, the chunks of the steps it met,
// the chunks it ran and has not counted yet, and its current loop.
struct Member {
  Region* region = nullptr;  // null: no pooled region (orphaned constructs, or a team of one)
  uint32_t step = 0;
  uint64_t expected = 0, pending = 0, ran = 0;
  int64_t start = 0, incr = 1, chunk = 1, iterations = 0;
  uint64_t chunks = 0;
  bool local_left = false;   // outside a pooled region: the loop's one chunk not yet handed out
  bool asked_team = false;   // this thread asked for its team in this region
  int tid = 0, size = 1;
  int64_t waited = 0;        // waits at barriers, in ticks (the straggler rule)
};
thread_local Member me;

// Claim the next chunks of step j (of `chunks`): 1/team of those left, at least one (a guided
// schedule over Algorithm 8.1's chunks: fewer claims, each a cache line moved between cores).
// Sets [*first, *first + taken) and returns `taken`, or 0 when every chunk is claimed.
uint64_t claim(Region& r, uint32_t j, uint64_t chunks, uint64_t team, uint64_t* first) {
  if (chunks == 0) return 0;
  std::atomic<uint64_t>& word = r.claims[j % STEPS].word;
  const uint64_t mine = uint64_t(j) + 1;
  uint64_t v = word.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t step = v >> 32, next = step == mine ? v & 0xffffffffu : 0;
    if (step > mine || next >= chunks) return 0;  // (1): a later step, or all claimed
    const uint64_t taken = std::max<uint64_t>(1, (chunks - next) / team);
    if (word.compare_exchange_weak(v, mine << 32 | (next + taken), std::memory_order_acq_rel,
                                   std::memory_order_acquire)) {  // the first claim sets the slot
      *first = next;
      return taken;
    }
  }
}

void count_ran() {  // (3): add the chunks this thread ran to `done`
  if (me.pending == 0) return;
  me.region->done.add(me.pending);
  me.ran += me.pending;
  me.pending = 0;
}

void refuse_barrier() {
  std::fprintf(stderr, "stax_parallel: a barrier after omp_get_num_threads()/omp_get_thread_num() in a region; "
                       "the pool's barriers count chunks: use schedule(dynamic, k) instead of a static schedule\n");
  std::abort();
}

// Lending the caller's core: a caller that spun as long as it may and still waits on pool threads
// inside its region is about to sleep, leaving its core idle, while a member that lost its core to
// another task waits behind it there for a time slice (the kernel does not move a thread that ran a
// moment ago).  The caller pins the members still inside to its own core (sched_setaffinity moves a
// waiting thread at once), sleeps, and gives each its own affinity back when its wait is over.
// Affinity is not semantics: (1)-(4) hold whoever runs where.
void lend_core(uint32_t number, int size) {
  const int cpu = sched_getcpu();
  if (cpu < 0) return;
  cpu_set_t here;
  CPU_ZERO(&here);
  CPU_SET(cpu, &here);
  for (int t = 1; t < size; ++t) {
    Slot* slot = pool.slots[t - 1];
    const pid_t thread = slot->os_tid.load(std::memory_order_relaxed);
    if (thread == 0 || slot->inside.load(std::memory_order_acquire) != number || !CPU_ISSET(cpu, &slot->home))
      continue;
    if (sched_setaffinity(thread, sizeof here, &here) == 0) pool.borrowers[pool.borrowing++] = t;
  }
  if (pool.borrowing > 0) pool.lent.fetch_add(1, std::memory_order_relaxed);
}

// Each borrower leaves the caller's core (its home less this core moves it at once: left here, it
// would share the core with its caller in the next regions until the kernel balanced the two),
// then gets its home back.
void take_core_back() {
  const int cpu = sched_getcpu();
  for (int i = 0; i < pool.borrowing; ++i) {
    Slot* slot = pool.slots[pool.borrowers[i] - 1];
    const pid_t thread = slot->os_tid.load(std::memory_order_relaxed);
    cpu_set_t elsewhere = slot->home;
    if (cpu >= 0) CPU_CLR(cpu, &elsewhere);
    if (CPU_COUNT(&elsewhere) > 0) sched_setaffinity(thread, sizeof elsewhere, &elsewhere);
    sched_setaffinity(thread, sizeof slot->home, &slot->home);
  }
  pool.borrowing = 0;
}

void barrier() {
  if (me.region == nullptr) return;
  if (me.asked_team) refuse_barrier();
  count_ran();
  const uint64_t expected = me.expected;  // (3): every chunk of the steps this thread met has run
  const auto ready = [expected](uint64_t v) { return v >= expected; };
  Word<uint64_t>& done = me.region->done;
  if (ready(done.value.load(std::memory_order_acquire))) return;
  const int64_t start = ticks();  // the straggler rule counts waits apart from work
  if (me.tid == 0) {  // the caller, which owns the pool
    const int size = me.size;
    done.wait_until(ready, me.region->spin, SPIN_SECONDS, [size] { lend_core(pool.number, size); });
    take_core_back();
  } else {
    done.wait_until(ready, me.region->spin);
  }
  me.waited += ticks() - start;
}

void test_stall() {  // the test hook: a pool thread that loses its core while it holds chunks
  if (const int64_t us = pool.stall_us.exchange(0, std::memory_order_relaxed); us > 0)
    std::this_thread::sleep_for(std::chrono::microseconds(us));
}

bool loop_next(long* istart, long* iend) {
  if (me.region == nullptr) {
    if (!me.local_left) return false;
    me.local_left = false;
    *istart = me.start;
    *iend = me.start + me.iterations * me.incr;
    return true;
  }
  uint64_t c = 0;
  const uint64_t taken = claim(*me.region, me.step - 1, me.chunks, uint64_t(me.size), &c);
  if (taken == 0) return false;
  me.pending += taken;
  if (me.tid != 0 && pool.stall_us.load(std::memory_order_relaxed) > 0) test_stall();
  *istart = me.start + int64_t(c) * me.chunk * me.incr;
  *iend = me.start + std::min<int64_t>(int64_t(c + taken) * me.chunk, me.iterations) * me.incr;
  return true;
}

// A worksharing loop begins: its chunks, and (in a pooled region) its step.
void begin_loop(long start, long end, long incr, long chunk) {
  const int64_t span = incr > 0 ? end - start : start - end, step = incr > 0 ? incr : -incr;
  me.start = start;
  me.incr = incr;
  me.iterations = span > 0 ? (span + step - 1) / step : 0;
  me.chunk = std::max<int64_t>(chunk, 1);
  if (me.region == nullptr) {
    me.local_left = me.iterations > 0;
    return;
  }
  me.chunk = std::max<int64_t>(me.chunk, (me.iterations + MAX_CHUNKS - 1) / MAX_CHUNKS);
  me.chunks = (me.iterations + me.chunk - 1) / me.chunk;
  me.expected += me.chunks;
  ++me.step;
}

// `members`' low half: CLOSED, pool threads that joined (bits 16-30), pool threads inside (0-15).
const uint64_t JOINED = uint64_t(1) << 16;
uint64_t inside(uint64_t members) { return members & (JOINED - 1); }
uint64_t joined(uint64_t members) { return (members & (CLOSED - 1)) >> 16; }

void enter(Region& r, int tid) {
  me = Member{};
  me.region = &r;
  me.tid = tid;
  me.size = r.size;
  if (r.loop.combined) begin_loop(r.loop.start, r.loop.end, r.loop.incr, r.loop.chunk);
}

bool join(Region& r, uint32_t number) {  // (4): only into the open region handed to this thread
  uint64_t m = r.members.value.load(std::memory_order_acquire);
  for (;;) {
    if ((m >> 32) != number || (m & CLOSED)) return false;
    if (r.members.value.compare_exchange_weak(m, m + JOINED + 1, std::memory_order_acq_rel,
                                              std::memory_order_acquire)) {
      r.members.wake();  // a caller waiting for its whole team
      return true;
    }
  }
}

void test_delay() {  // the test hooks: hold the pool thread, or delay it a random while
  pool.hold.wait_until([](uint32_t v) { return v == 0; }, false);
  if (const int64_t most = pool.delay_us.load(std::memory_order_relaxed); most > 0) {
    thread_local std::minstd_rand random(std::random_device{}());
    std::this_thread::sleep_for(std::chrono::microseconds(random() % most));
  }
}

void serve(Slot* slot) {
  slot->os_tid.store(pid_t(syscall(SYS_gettid)), std::memory_order_relaxed);
  bool spin = true;  // as the last region joined said
  for (uint32_t seen = 0;;) {
    slot->start.wait_while(seen, spin);
    seen = slot->start.value.load(std::memory_order_acquire);
    test_delay();
    Region& r = pool.region;
    if (!join(r, seen)) {  // a pool thread that wakes after the work is gone returns at once
      pool.late.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    spin = r.spin;
    slot->inside.store(seen, std::memory_order_release);
    const int64_t joined_at = ticks();
    enter(r, slot->tid);
    r.fn(r.data);
    count_ran();
    r.member_ticks.fetch_add(ticks() - joined_at - me.waited, std::memory_order_relaxed);  // before leaving (4)
    me = Member{};
    slot->inside.store(0, std::memory_order_relaxed);
    r.members.add(uint64_t(-1));  // (4): leaves; the caller may be waiting for no member to be left
  }
}

// Start pool threads up to `wanted`; returns how many there are.
int grow(int wanted) {
  while (pool.threads < wanted) {
    Slot* slot = new (std::nothrow) Slot;
    if (slot == nullptr) break;
    slot->tid = pool.threads + 1;
    if (sched_getaffinity(0, sizeof slot->home, &slot->home) != 0) CPU_ZERO(&slot->home);  // inherited
    try {
      std::thread(serve, slot).detach();
    } catch (...) {
      delete slot;
      break;
    }
    pool.slots[pool.threads++] = slot;
  }
  return pool.threads;
}

void run_alone(void (*fn)(void*), void* data, const Loop& loop, std::atomic<int64_t>& counter) {
  const Member outer = me;
  me = Member{};
  if (loop.combined) begin_loop(loop.start, loop.end, loop.incr, loop.chunk);
  fn(data);
  me = outer;
  counter.fetch_add(1, std::memory_order_relaxed);
}

// Nanoseconds a tick, over the time since the first pooled region; 0 in its first millisecond.
double ns_per_tick() {
  const int64_t elapsed = now_ns() - pool.first_ns;
  return elapsed < 1000000 ? 0 : double(elapsed) / double(std::max<int64_t>(1, ticks() - pool.first_ticks));
}

// Whether the caller of a region, which waited `waited` ns for its pool threads after running
// `chunks` chunks in `worked` ns itself, while the pool threads ran `member_chunks` chunks in
// `member_worked` ns, waited on a straggler (members that only had more of the work, at the
// caller's pace, are none).
bool is_straggler(double waited, double worked, uint64_t chunks, uint64_t member_chunks, double member_worked) {
  if (waited <= 1e9 * STRAGGLER_FLOOR_SECONDS || waited <= worked) return false;
  return chunks == 0 || member_chunks == 0 ||
         member_worked * double(chunks) > STRAGGLER_SLOWDOWN * worked * double(member_chunks);
}

// The tasks runnable on the machine now, the caller included (the fourth field of /proc/loadavg,
// "runnable/total"), or -1 when it cannot be read.
long runnable_tasks() {
  char text[128] = {};
  const int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t got = read(fd, text, sizeof text - 1);
  close(fd);
  const char* field = text;
  for (int spaces = 0; got > 0 && spaces < 3 && *field != 0; ++field) spaces += *field == ' ';
  char* end = nullptr;
  const long runnable = std::strtol(field, &end, 10);
  return got > 0 && end != field && *end == '/' ? runnable : -1;
}

// Whether more tasks are runnable than the machine has CPUs: another process holds a core, and a
// straggler was not a moment's interruption (an interrupt, the host taking the virtual CPU, a late
// wake-up).  Read only when a straggler was found; unknown, it says crowded (the cautious rule).
bool crowded() {
  const long runnable = runnable_tasks();
  return runnable < 0 || CPUS == 0 || runnable > long(CPUS);
}

// The length of the solo window a straggler that kept its caller waiting `waited` ns opens, in ns.
// On a crowded machine (crowded()): SOLO_PER_WAIT times the wait (a wait of a time slice means
// another task holds the pool thread's core, a short one a late wake-up), and at least the last
// window (`last`, 0 if none) grown, while stragglers recur (`since` ns after its end); within
// SOLO_MIN_SECONDS and SOLO_MAX_SECONDS.  Otherwise SOLO_PER_WAIT times the wait, at most
// SOLO_MIN_SECONDS: a moment's interruption recurs on a quiet machine too (tens of times a second
// on a virtual one), and grown windows kept small regions off the pool there.
int64_t solo_window(int64_t last, int64_t since, double waited, bool crowded) {
  const int64_t shortest = int64_t(1e9 * SOLO_MIN_SECONDS), longest = int64_t(1e9 * SOLO_MAX_SECONDS);
  if (!crowded) return std::min(int64_t(SOLO_PER_WAIT * waited), shortest);
  const bool recurring = last > 0 && since < int64_t(1e9 * SOLO_MEMORY_SECONDS);
  const double wanted = std::max(SOLO_PER_WAIT * waited, recurring ? double(SOLO_GROWTH * last) : 0.0);
  return std::clamp(int64_t(std::min(wanted, double(longest))), shortest, longest);
}

// The straggler rule (the arguments are is_straggler's): run the next regions alone for a while.
void judge(double waited, double worked, uint64_t chunks, uint64_t member_chunks, double member_worked) {
  if (!is_straggler(waited, worked, chunks, member_chunks, member_worked)) return;
  pool.stragglers.fetch_add(1, std::memory_order_relaxed);  // counted with the rule off too
  if (!pool.straggler_rule.load(std::memory_order_relaxed)) return;
  const int64_t now = now_ns();
  pool.solo_ns = solo_window(pool.solo_ns, now - pool.window_end, waited, crowded());
  pool.window_end = pool.solo_until = now + pool.solo_ns;
}

// The caller's side of a region on the pool (which it holds): open, hand over, run, close.
void run_pooled(void (*fn)(void*), void* data, int size, bool spin, const Loop& loop) {
  Region& r = pool.region;  // (4): no member exists, the last region's caller saw them all leave
  r.loop = loop;
  for (uint32_t j = 0; j < pool.used; ++j) r.claims[j].word.store(0, std::memory_order_relaxed);
  r.done.value.store(0, std::memory_order_relaxed);
  r.member_ticks.store(0, std::memory_order_relaxed);
  r.whole_team.store(false, std::memory_order_relaxed);
  r.fn = fn;
  r.data = data;
  r.size = size;
  r.spin = spin;
  const uint32_t number = ++pool.number;
  const int64_t began = ticks();
  r.members.value.store(uint64_t(number) << 32, std::memory_order_seq_cst);  // open; joiners see the above
  for (int t = 1; t < size; ++t) pool.slots[t - 1]->start.publish(number);
  const Member outer = me;
  enter(r, 0);
  fn(data);  // (2): every step met, every chunk claimed
  count_ran();
  const Member mine = me;
  me = outer;
  // (4): nobody joins any more, unless the code asked for its team (closed once all of it joined)
  const bool whole_team = r.whole_team.load(std::memory_order_relaxed);
  const uint64_t before = whole_team ? 0 : r.members.value.fetch_or(CLOSED, std::memory_order_seq_cst);
  if (whole_team || inside(before) != 0 || mine.waited > 0) {  // the caller waits: time it
    const int64_t ran = ticks();
    const double tick = ns_per_tick(), worked = tick * double(ran - began - mine.waited);
    // Spin no longer than the caller worked: a straggler's core is better left idle, where
    // the kernel may move the awaited thread.
    const double most =
        tick == 0 ? SPIN_SECONDS : std::min(SPIN_SECONDS, std::max(STRAGGLER_FLOOR_SECONDS, 1e-9 * worked));
    if (whole_team) {
      const uint64_t team = uint64_t(size - 1);
      r.members.wait_until([team](uint64_t m) { return joined(m) == team; }, spin, most);
      r.members.value.fetch_or(CLOSED, std::memory_order_seq_cst);
    }
    r.members.wait_until([](uint64_t m) { return inside(m) == 0; }, spin, most,
                         [number, size] { lend_core(number, size); });
    take_core_back();
    if (tick > 0)
      judge(tick * double(mine.waited + ticks() - ran), worked, mine.ran, mine.expected - mine.ran,
            tick * double(r.member_ticks.load(std::memory_order_relaxed)));
  }
  pool.used = std::min(mine.step, STEPS);
  const uint64_t share = (mine.expected + size - 1) / size;
  if (mine.ran > share) pool.taken_back.fetch_add(int64_t(mine.ran - share), std::memory_order_relaxed);
  if (mine.expected > mine.ran) pool.shared.fetch_add(int64_t(mine.expected - mine.ran), std::memory_order_relaxed);
}

void ask_team() {
  if (me.region == nullptr) return;
  me.asked_team = true;
  me.region->whole_team.store(true, std::memory_order_relaxed);
}

void after_fork_in_child() {  // the pool's threads were not forked
  new (&pool) Pool;
}

[[maybe_unused]] const bool registered = pthread_atfork(nullptr, nullptr, after_fork_in_child) == 0;

// A region, whose function starts in the worksharing loop `loop` when loop.combined.
void parallel(void (*fn)(void*), void* data, unsigned num_threads, const Loop& loop) {
  int size = int(std::min<unsigned>(num_threads ? num_threads : CPUS, MAX_TEAM));
  if (size <= 1 || me.region != nullptr || pool.busy.test_and_set(std::memory_order_acquire)) {
    run_alone(fn, data, loop, pool.alone);
    return;
  }
  size = std::min(size, grow(size - 1) + 1);  // fewer when the system starts no more threads
  if (size <= 1) {
    pool.busy.clear(std::memory_order_release);
    run_alone(fn, data, loop, pool.alone);
    return;
  }
  if (pool.solo_until != 0) {  // the straggler rule: alone until the window ends, then try the pool
    if (now_ns() < pool.solo_until && pool.straggler_rule.load(std::memory_order_relaxed)) {
      pool.busy.clear(std::memory_order_release);
      run_alone(fn, data, loop, pool.solo);
      return;
    }
    pool.solo_until = 0;
  }
  if (pool.first_ns == 0) {
    pool.first_ns = now_ns();
    pool.first_ticks = ticks();
  }
  run_pooled(fn, data, size, CPUS == 0 || unsigned(size) <= CPUS, loop);
  pool.pooled.fetch_add(1, std::memory_order_relaxed);
  pool.busy.clear(std::memory_order_release);
}

}  // namespace stax_parallel

using namespace stax_parallel;

extern "C" {

void __wrap_GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned /*flags*/) {
  parallel(fn, data, num_threads, Loop{});
}

// A region that is one `omp for schedule(dynamic, chunk)` (GCC combines them): its threads
// start with the loop begun and call only GOMP_loop_*_next.
void __wrap_GOMP_parallel_loop_nonmonotonic_dynamic(void (*fn)(void*), void* data, unsigned num_threads, long start,
                                                    long end, long incr, long chunk, unsigned /*flags*/) {
  parallel(fn, data, num_threads, Loop{true, start, end, incr, chunk});
}
void __wrap_GOMP_parallel_loop_dynamic(void (*fn)(void*), void* data, unsigned num_threads, long start, long end,
                                       long incr, long chunk, unsigned /*flags*/) {
  parallel(fn, data, num_threads, Loop{true, start, end, incr, chunk});
}

// `omp for schedule(dynamic, chunk)` (GCC 12 lowers plain `dynamic` to the nonmonotonic calls;
// chunks are claimed in increasing order, so both orders hold).
bool __wrap_GOMP_loop_nonmonotonic_dynamic_start(long start, long end, long incr, long chunk, long* istart,
                                                 long* iend) {
  begin_loop(start, end, incr, chunk);
  return loop_next(istart, iend);
}
bool __wrap_GOMP_loop_nonmonotonic_dynamic_next(long* istart, long* iend) { return loop_next(istart, iend); }
bool __wrap_GOMP_loop_dynamic_start(long start, long end, long incr, long chunk, long* istart, long* iend) {
  begin_loop(start, end, incr, chunk);
  return loop_next(istart, iend);
}
bool __wrap_GOMP_loop_dynamic_next(long* istart, long* iend) { return loop_next(istart, iend); }
void __wrap_GOMP_loop_end() { barrier(); }
void __wrap_GOMP_loop_end_nowait() {}
void __wrap_GOMP_barrier() { barrier(); }

bool __wrap_GOMP_single_start() {  // a step of one chunk: whoever claims it runs the block
  if (me.region == nullptr) return true;
  ++me.step;
  me.expected += 1;
  uint64_t c = 0;
  if (claim(*me.region, me.step - 1, 1, 1, &c) == 0) return false;
  ++me.pending;
  return true;
}

int __wrap_omp_get_thread_num() {
  ask_team();
  return me.tid;
}

int __wrap_omp_get_num_threads() {
  ask_team();
  return me.size;
}

// Regions run on the pool, regions run by their calling thread alone, pool threads started,
// waits that ended asleep, chunks the caller took back (ran beyond its even share of a region's
// chunks), regions handed to a pool thread that were over when it came to join them, chunks run
// by pool threads, regions whose caller waited on a straggler, regions run alone by the rule,
// waits in which the caller lent its core to pool threads.
// Called by each library of kernels of `bits`-bit vectors when it is loaded (stax_vec.h).
void stax_parallel_vector_bits(int bits) {
#if defined(__x86_64__)
  if (bits >= 512 && __builtin_cpu_supports("avx512f")) warm_512.store(true, std::memory_order_relaxed);
#endif
}

void stax_parallel_stats(int64_t* out) {
  out[0] = pool.pooled.load();
  out[1] = pool.alone.load();
  out[2] = pool.threads;
  out[3] = sleeps.load();
  out[4] = pool.taken_back.load();
  out[5] = pool.late.load();
  out[6] = pool.shared.load();
  out[7] = pool.stragglers.load();
  out[8] = pool.solo.load();
  out[9] = pool.lent.load();
}

// Test hooks: hold every pool thread before it joins a region (held != 0) or let it go, delay
// each join by a random 0 .. most_us microseconds, stall the next pool thread that claims chunks
// for `us` microseconds (it holds them meanwhile), the straggler rule's window, the runnable tasks
// it reads, whether waits keep the 512-bit units busy, turn the straggler rule off (0) or on.
void stax_parallel_test_hold(int held) { pool.hold.publish(held != 0); }
void stax_parallel_test_delay(int64_t most_us) { pool.delay_us.store(most_us, std::memory_order_relaxed); }
void stax_parallel_test_stall(int64_t us) { pool.stall_us.store(us, std::memory_order_relaxed); }
int stax_parallel_test_is_straggler(double waited_us, double worked_us, int64_t chunks, int64_t member_chunks,
                                    double member_worked_us) {
  return is_straggler(1e3 * waited_us, 1e3 * worked_us, uint64_t(chunks), uint64_t(member_chunks), 1e3 * member_worked_us);
}
int64_t stax_parallel_test_solo_window(int64_t last_ns, int64_t since_ns, double waited_us, int crowded) {
  return solo_window(last_ns, since_ns, 1e3 * waited_us, crowded != 0);
}
long stax_parallel_test_runnable_tasks() { return runnable_tasks(); }
int stax_parallel_test_warm_512() { return warm_512.load(); }
void stax_parallel_test_straggler_rule(int on) { pool.straggler_rule.store(on != 0, std::memory_order_relaxed); }

}  // extern "C"
