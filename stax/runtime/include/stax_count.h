// Counting build of stax kernels (traffic accounting): every load and store marks the bytes it
// touches in per-buffer maps registered by the runtime, so the bytes a kernel really moves can
// be checked against Definition 7.3's model.  Used single-threaded only.
#pragma once
#include "stax_vec.h"

namespace stax {

struct CountSlot {
  const char* base = nullptr;
  uint8_t* read = nullptr;
  uint8_t* write = nullptr;
};
inline CountSlot count_slots[256];

// A load of a byte this kernel stored earlier is not marked: it is read back from cache (a
// sequential block reading a value of an earlier point, Proposition 7.3 (1)).
inline void count_mark(const void* p, size_t bytes, int slot, bool write) {
  CountSlot& s = count_slots[slot];
  size_t at = (const char*)p - s.base;
  for (size_t i = 0; i < bytes; ++i) {
    if (write) s.write[at + i] = 1;
    else if (!s.write[at + i]) s.read[at + i] = 1;
  }
}
template <typename T> inline T count_load(const T* p, int64_t i, int slot) {
  count_mark(p + i, sizeof(T), slot, false);
  return p[i];
}
template <typename T> inline auto count_vload(const T* p, int slot) {
  count_mark(p, STAX_W * sizeof(T), slot, false);
  return vload(p);
}
template <typename T, typename V> inline void count_store(T* p, int64_t i, V v, int slot) {
  count_mark(p + i, sizeof(T), slot, true);
  p[i] = v;
}
template <typename T, typename V> inline void count_vstore(T* p, V v, int slot) {
  count_mark(p, STAX_W * sizeof(T), slot, true);
  vstore(p, v);
}

}  // namespace stax

extern "C" void stax_count_register(int slot, const void* base, uint8_t* read, uint8_t* write) {
  stax::count_slots[slot] = {(const char*)base, read, write};
}
