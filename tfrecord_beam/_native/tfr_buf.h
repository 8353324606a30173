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

/* Grow to hold at least `need` bytes (tfr_buf.c); 0 on success, -1 when out of memory. */
int tfr_buf_grow(tfr_buf *b, size_t need);

/* Make room for `extra` more bytes; 0 on success, -1 when out of memory. */
static inline int tfr_buf_reserve(tfr_buf *b, size_t extra) {
    if (b->cap - b->len >= extra) return 0;
    if (b->len + extra < b->len) return -1; /* overflow */
    return tfr_buf_grow(b, b->len + extra);
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
