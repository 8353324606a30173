/* Protobuf wire-format reading, bounds-checked, with upb's limits (see DESIGN.md, "The compiled
 * core"): varints of at most 10 bytes, tags of at most 5 bytes and 32 bits, field number 0 and
 * wire types 6/7 rejected, groups matched and nested at most TFR_MAX_DEPTH deep. Plain C. */
#ifndef TFR_WIRE_H
#define TFR_WIRE_H
#include <stddef.h>
#include <stdint.h>

#define TFR_MAX_DEPTH 100 /* upb's default recursion limit: submessages + groups */

enum { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_FIXED32 = 5 };

/* Read a varint of at most 10 bytes from [*pp, end). 0 on success. */
static inline int tfr_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) { *out = *p; *pp = p + 1; return 0; }
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end) return -1;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7F) << (7 * i); /* bits past 64 are dropped, as upb does */
        if (b < 0x80) { *out = v; *pp = p; return 0; }
    }
    return -1;
}

/* tfr_varint over [*pp, end), unrolled without per-byte bounds checks when 10 bytes up to
 * `readable` (>= end) may be read; a varint running past `end` is an error all the same. The
 * hot path of packed int64 runs; same results as tfr_varint. */
#define TFR_RET(len) do { if (p + (len) > end) return -1; *out = r; *pp = p + (len); return 0; } while (0)
static inline int tfr_varint_fast(const uint8_t **pp, const uint8_t *end, const uint8_t *readable, uint64_t *out) {
    const uint8_t *p = *pp;
    if (readable - p < 10) return tfr_varint(pp, end, out);
    uint64_t r = p[0];
    if (r < 0x80) TFR_RET(1);
#define TFR_STEP(k)                                                              \
    r = (r & ((1ull << (7 * (k))) - 1)) | ((uint64_t)p[k] << (7 * (k)));          \
    if (p[k] < 0x80) TFR_RET((k) + 1);
    TFR_STEP(1) TFR_STEP(2) TFR_STEP(3) TFR_STEP(4) TFR_STEP(5) TFR_STEP(6) TFR_STEP(7) TFR_STEP(8)
#undef TFR_STEP
    r = (r & ((1ull << 63) - 1)) | ((uint64_t)p[9] << 63); /* bits past 64 are dropped */
    if (p[9] < 0x80) TFR_RET(10);
    return -1;
}
#undef TFR_RET

/* Read a tag: at most 5 bytes, value below 2^32, field number not 0. */
static inline int tfr_tag(const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wt) {
    const uint8_t *p = *pp;
    uint64_t v;
    if (p < end && *p < 0x80) {
        v = *p++;
    } else {
        v = 0;
        int i = 0;
        for (;; i++) {
            if (i == 5 || p >= end) return -1;
            uint8_t b = *p++;
            v |= (uint64_t)(b & 0x7F) << (7 * i);
            if (b < 0x80) break;
        }
        if (v > 0xFFFFFFFFu) return -1;
    }
    if ((v >> 3) == 0) return -1;
    *field = (uint32_t)(v >> 3);
    *wt = (int)(v & 7);
    *pp = p;
    return 0;
}

/* Read a length prefix and check the bytes it covers lie inside [*pp, end). */
static inline int tfr_len(const uint8_t **pp, const uint8_t *end, size_t *len) {
    uint64_t v;
    if (tfr_varint(pp, end, &v)) return -1;
    if (v > (uint64_t)(end - *pp)) return -1;
    *len = (size_t)v;
    return 0;
}

/* Skip the value of a field (already past its tag) of wire type `wt` in a message at `depth`.
 * Groups are walked to their matching end tag. 0 on success. */
int tfr_skip(const uint8_t **pp, const uint8_t *end, int wt, uint32_t field, int depth);

#endif
