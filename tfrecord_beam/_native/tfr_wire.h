/* Protobuf wire-format reading, bounds-checked, with upb's limits (see DESIGN.md, "The compiled
 * core"): varints of at most 10 bytes, tags of at most 5 bytes and 32 bits, field number 0 and
 * wire types 6/7 rejected, groups matched and nested at most TFR_MAX_DEPTH deep. Plain C. */
#ifndef TFR_WIRE_H
#define TFR_WIRE_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define TFR_BIG_ENDIAN 1
#endif
/* Word-at-a-time (SWAR) varint runs: little-endian hosts with GCC/Clang builtins (TFR_NO_SWAR:
 * the scalar path everywhere, to test it on such a host). */
#if !defined(TFR_BIG_ENDIAN) && !defined(TFR_NO_SWAR) && (defined(__GNUC__) || defined(__clang__))
#define TFR_SWAR 1
#endif

#ifdef TFR_SWAR
#define TFR_HI7 0x8080808080808080ull /* the continuation bit of each byte */

/* The 7-bit groups of two varints' first bytes packed into one 56-bit value each (each lane:
 * 8 bytes read little-endian, continuation bits and bytes past the varint already cleared).
 * Two lanes at once: SSE2 / NEON through GCC vector extensions. */
typedef uint64_t tfr_u64x2 __attribute__((vector_size(16)));
static inline tfr_u64x2 tfr_swar_compact2(tfr_u64x2 x) {
    x = ((x & 0x7F007F007F007F00ull) >> 1) | (x & 0x007F007F007F007Full);
    x = ((x & 0x3FFF00003FFF0000ull) >> 2) | (x & 0x00003FFF00003FFFull);
    return ((x & 0x0FFFFFFF00000000ull) >> 4) | (x & 0x000000000FFFFFFFull);
}
#endif

/* A packed run of varints [p, stop), the hot path of Int64List: valid iff every varint ends
 * inside the run and none is longer than 10 bytes (tfr_varint's rules: a 10th byte below 0x80
 * is accepted whatever its value, bits past 64 dropped). `readable` (>= stop): bytes up to it
 * may be read ahead. With dst, the values (same as tfr_varint's) are stored there (room for
 * stop - p + 1 of them: one spare). Returns the number of values, or -1 when the run is malformed.
 *
 * Word at a time on little-endian hosts: validation scans 8 bytes per step for the bytes
 * below 0x80 (each ends a varint) and only tracks how many continuation bytes run on across
 * words; decoding takes the first two varints that end inside each 8-byte load (their ends
 * found with ctz) and compacts their 7-bit groups together in three shift/mask steps. No
 * branch depends on the length of a varint, so random 1-3 byte lengths do not mispredict. The
 * scalar tfr_varint finishes what is near the end of `readable`. */
static inline ptrdiff_t tfr_varint_run(const uint8_t *p, const uint8_t *stop, const uint8_t *readable, uint64_t *dst) {
    ptrdiff_t count = 0;
    if (!dst) {
        size_t cont = 0; /* continuation bytes just before p: the open varint's length so far */
#ifdef TFR_SWAR
        for (; stop - p >= 8; p += 8) {
            uint64_t x;
            memcpy(&x, p, 8);
            uint64_t ends = ~x & TFR_HI7;
            if (!ends) {
                if ((cont += 8) > 9) return -1;
                continue;
            }
            if (cont + ((size_t)__builtin_ctzll(ends) >> 3) > 9) return -1;
            cont = (size_t)__builtin_clzll(ends) >> 3; /* bytes after the last end in the word */
            count += (ptrdiff_t)(((ends >> 7) * 0x0101010101010101ull) >> 56);
        }
#endif
        for (; p < stop; p++) {
            if (*p < 0x80) { count++; cont = 0; }
            else if (++cont > 9) return -1;
        }
        return cont ? -1 : count;
    }
    while (p < stop) {
        uint64_t v;
#ifdef TFR_SWAR
        if (readable - p >= 8) {
            uint64_t x;
            memcpy(&x, p, 8);
            ptrdiff_t lim = stop - p;
            /* bytes below 0x80 inside both the word and the run: each ends a varint */
            uint64_t ends = ~x & TFR_HI7 & (lim >= 8 ? ~0ull : (1ull << (8 * lim)) - 1);
            if (ends) { /* the first one or two varints, without a branch on their lengths */
                uint64_t rest = ends & (ends - 1), upto1 = ends ^ (ends - 1), upto2 = rest ^ (rest - 1);
                tfr_u64x2 two = {x & upto1, (x & upto2) >> ((__builtin_ctzll(ends) + 1) & 63)};
                two = tfr_swar_compact2(two & ~TFR_HI7);
                memcpy(dst + count, &two, 16); /* a spare slot when there is no second one */
                count += 1 + (rest != 0);
                p += (__builtin_ctzll(rest ? rest : ends) >> 3) + 1;
                continue;
            }
            if (lim < 8) return -1; /* the varint does not end inside the run */
            if (readable - p >= 10) { /* 9 or 10 bytes (negative numbers are 10) */
                tfr_u64x2 low = {x & ~TFR_HI7, 0};
                v = tfr_swar_compact2(low)[0] | ((uint64_t)(p[8] & 0x7F) << 56);
                ptrdiff_t len = 9;
                if (p[8] >= 0x80) {
                    if (p[9] >= 0x80) return -1;
                    v |= (uint64_t)p[9] << 63; /* bits past 64 are dropped */
                    len = 10;
                }
                if (len > lim) return -1;
                memcpy(dst + count++, &v, 8);
                p += len;
                continue;
            }
        }
#endif
        if (tfr_varint(&p, stop, &v)) return -1;
        memcpy(dst + count++, &v, 8);
    }
    (void)readable;
    return count;
}

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
