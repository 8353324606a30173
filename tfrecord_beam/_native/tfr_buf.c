/* Growth of tfr_buf: doubling realloc; big buffers get transparent huge pages where Linux
 * offers them, which cuts the page faults of filling fresh memory (16 KiB images, say). */
#define _DEFAULT_SOURCE
#include "tfr_buf.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#define HUGE_FROM (8u << 20)

int tfr_buf_grow(tfr_buf *b, size_t need) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) { cap = need; break; }
        cap *= 2;
    }
    uint8_t *d = (uint8_t *)realloc(b->data, cap);
    if (!d) return -1;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (cap >= HUGE_FROM) {
        uintptr_t lo = ((uintptr_t)d + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1);
        uintptr_t hi = ((uintptr_t)d + cap) & ~(uintptr_t)((2u << 20) - 1);
        if (hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* advice only: errors ignored */
    }
#endif
    b->data = d;
    b->cap = cap;
    return 0;
}
