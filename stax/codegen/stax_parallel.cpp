// The kernels' OpenMP runtime: the part of libgomp's ABI that GCC lowers the kernels' constructs
// to (section 8.5's `#pragma omp parallel`, `omp for` with its static schedule, `omp barrier`,
// `omp single`), on one process-wide pool of threads that spin before they sleep.  The kernels
// are linked with `--wrap` for these five symbols (runtime.LINK_FLAGS), so they call the
// `__wrap_` functions below and never libgomp; other libraries of the process keep libgomp.
//
// Why: libgomp calls futex wake at both barriers of every region even when its threads spin, so
// an empty two-thread region cost about 0.9 us on an AVX2 host, against 0.06 us for a region that
// only wakes a thread that sleeps; at 64 x 128 that was a sixth of a one-kernel program's call.
// On an AVX-512 host, in a loop: libgomp 1.1-1.2 us, this pool 0.7 us.
//
// A region runs on the pool when its calling thread holds the pool; a region that finds the pool
// taken (by another thread of the process, or nested in a region) runs on its calling thread
// alone, a team of one, which every kernel computes correctly (its schedule is computed from the
// team's size).  A thread waits by spinning SPIN_SECONDS, then sleeps on a futex, which the
// waking side calls only when someone sleeps.  With more threads than CPUs, or under OpenMP's
// OMP_WAIT_POLICY=passive, nothing spins.  A forked child starts with no pool threads.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <strings.h>
#include <new>
#include <thread>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace stax_parallel {

double spin_seconds() {  // about what libgomp spins by default before it sleeps
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return policy != nullptr && strcasecmp(policy, "passive") == 0 ? 0 : 3e-4;
}
const double SPIN_SECONDS = spin_seconds();
std::atomic<int64_t> sleeps{0};  // waits that ended asleep
const int MAX_TEAM = 256;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// A word that threads wait on to change, and the count of those asleep on it.
struct Word {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> sleepers{0};

  void wait_while(uint32_t old, bool spin) {
    if (spin && SPIN_SECONDS > 0) {  // the clock is first read after a while: most waits end before
      std::chrono::steady_clock::time_point start;
      for (uint32_t i = 1;; ++i) {
        if (value.load(std::memory_order_acquire) != old) return;
        cpu_relax();
        if (i % 256 == 0) {
          const auto now = std::chrono::steady_clock::now();
          if (i == 256) start = now;
          else if (std::chrono::duration<double>(now - start).count() > SPIN_SECONDS) break;
        }
      }
    }
    sleeps.fetch_add(1, std::memory_order_relaxed);
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    while (value.load(std::memory_order_seq_cst) == old)
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&value), FUTEX_WAIT_PRIVATE, old, nullptr, nullptr, 0);
    sleepers.fetch_sub(1, std::memory_order_relaxed);
  }

  // A sleeper counts itself before it reads the value and this reads the count after it writes
  // the value (both sequentially consistent): either it sees the new value or it is woken.
  void publish(uint32_t next) {
    value.store(next, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) > 0)
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&value), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  }
};

// What the master hands one pool thread for a region.  The region's fields share the cache line
// of the word that hands it over, so the pool thread takes them with the transfer of that line
// that shows it the new value; it reports the region done on a line of its own, which only the
// master reads.  On an AVX-512 host whose two cores take 0.35 to 0.45 us for a round trip, an
// empty two-thread region in a loop took 0.67 to 0.77 us (0.74 to 0.86 with a count of running
// threads and a join word that every pool thread updated).
struct alignas(64) Slot {
  Word start;  // bumped to hand over a region
  void (*fn)(void*) = nullptr;
  void* data = nullptr;
  int tid = 0, size = 1;
  bool spin = true;
  alignas(64) Word done;  // bumped when the pool thread has run the region: start's value then
};

struct Pool {
  std::atomic_flag busy = ATOMIC_FLAG_INIT;
  int threads = 0;  // pool threads started (team members 1 .. threads)
  Slot* slots[MAX_TEAM] = {};
  alignas(64) std::atomic<int> arrived{0};  // at the current barrier
  alignas(64) Word barrier;                 // bumped by the last to arrive
  bool spin = true;
  std::atomic<int64_t> pooled{0}, alone{0};  // regions run on the pool, and on their caller alone
};

Pool pool;
thread_local int team_tid = 0, team_size = 1;

void serve(Slot* slot) {
  bool spin = true;  // as the last region said: its fields are only read after it was handed over
  for (uint32_t seen = 0;;) {
    slot->start.wait_while(seen, spin);
    seen = slot->start.value.load(std::memory_order_acquire);
    spin = slot->spin;
    team_tid = slot->tid;
    team_size = slot->size;
    slot->fn(slot->data);
    team_tid = 0;
    team_size = 1;
    slot->done.publish(seen);
  }
}

// Start pool threads up to `wanted`; returns how many there are.
int grow(int wanted) {
  while (pool.threads < wanted) {
    Slot* slot = new (std::nothrow) Slot;
    if (slot == nullptr) break;
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

void run_alone(void (*fn)(void*), void* data) {
  const int tid = team_tid, size = team_size;
  team_tid = 0;
  team_size = 1;
  fn(data);
  team_tid = tid;
  team_size = size;
  pool.alone.fetch_add(1, std::memory_order_relaxed);
}

void after_fork_in_child() {  // the pool's threads were not forked
  new (&pool) Pool;
}

[[maybe_unused]] const bool registered = pthread_atfork(nullptr, nullptr, after_fork_in_child) == 0;

}  // namespace stax_parallel

using namespace stax_parallel;

extern "C" {

void __wrap_GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned /*flags*/) {
  static const unsigned cpus = std::thread::hardware_concurrency();  // reads a file each time
  int size = int(std::min<unsigned>(num_threads ? num_threads : cpus, MAX_TEAM));
  if (size <= 1 || team_size > 1 || pool.busy.test_and_set(std::memory_order_acquire)) {
    run_alone(fn, data);
    return;
  }
  size = std::min(size, grow(size - 1) + 1);  // fewer when the system starts no more threads
  const bool spin = cpus == 0 || unsigned(size) <= cpus;
  pool.spin = spin;
  for (int t = 1; t < size; ++t) {
    Slot* slot = pool.slots[t - 1];
    slot->fn = fn;
    slot->data = data;
    slot->tid = t;
    slot->size = size;
    slot->spin = spin;
    slot->start.publish(slot->start.value.load(std::memory_order_relaxed) + 1);
  }
  team_tid = 0;
  team_size = size;
  fn(data);
  team_size = 1;
  for (int t = 1; t < size; ++t) {  // until each pool thread has run the region it was handed
    Slot* slot = pool.slots[t - 1];
    slot->done.wait_while(slot->start.value.load(std::memory_order_relaxed) - 1, spin);
  }
  pool.pooled.fetch_add(1, std::memory_order_relaxed);
  pool.busy.clear(std::memory_order_release);
}

void __wrap_GOMP_barrier() {
  if (team_size <= 1) return;
  const uint32_t episode = pool.barrier.value.load(std::memory_order_acquire);
  if (pool.arrived.fetch_add(1, std::memory_order_acq_rel) == team_size - 1) {
    pool.arrived.store(0, std::memory_order_relaxed);
    pool.barrier.publish(episode + 1);
  } else {
    pool.barrier.wait_while(episode, pool.spin);
  }
}

bool __wrap_GOMP_single_start() { return team_tid == 0; }  // any one thread may run it

int __wrap_omp_get_thread_num() { return team_tid; }

int __wrap_omp_get_num_threads() { return team_size; }

// Regions run on the pool, regions run by their calling thread alone, pool threads started,
// waits that ended asleep.
void stax_parallel_stats(int64_t* out) {
  out[0] = pool.pooled.load();
  out[1] = pool.alone.load();
  out[2] = pool.threads;
  out[3] = sleeps.load();
}

}  // extern "C"
