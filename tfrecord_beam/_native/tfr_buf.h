/* A growable byte buffer (malloc/realloc) used for column outputs; plain C. */
#ifndef TFR_BUF_H
#define TFR_BUF_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *data;
    size_t len; /* bytes used */
    size_t cap; /* bytes allocated */
} tfr_buf;

/* Make room for `extra` more bytes; 0 on success, -1 when out of memory. */
static inline int tfr_buf_reserve(tfr_buf *b, size_t extra) {
    if (b->cap - b->len >= extra) return 0;
    size_t need = b->len + extra;
    if (need < b->len) return -1; /* overflow */
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) { cap = need; break; }
        cap *= 2;
    }
    uint8_t *d = (uint8_t *)realloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

static inline int tfr_buf_append(tfr_buf *b, const void *src, size_t n) {
    if (tfr_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static inline int tfr_buf_push_i64(tfr_buf *b, int64_t v) { return tfr_buf_append(b, &v, sizeof v); }

static inline void tfr_buf_free(tfr_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

#endif
