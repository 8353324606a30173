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

/* Where the varints lie in an 8-byte word whose end bytes (below 0x80) form pattern m (bit i:
 * byte i), m != 0: a mask of the first one's bytes (through its end; it joins the varint
 * running in from the word before), the shift and mask of the next three (the second's
 * again where there are fewer), how many end in the word, the bits of the first, and the
 * shift (below 64) and mask of the bytes after the last end (the next word's first varint
 * starts so; mask 0 when the word ends with an end byte). */
typedef struct {
    uint64_t first, mask[3], tail_mask;
    uint8_t shift[3], count, first_bits, tail_shift, tail_bits, pad;
} tfr_ends_entry;
extern tfr_ends_entry tfr_ends_table[256];
void tfr_wire_init(void); /* builds tfr_ends_table: once, before any thread uses it */

#define TFR_RUN_SLOW (-2)

/* The smallest and largest value of a packed run of varints [p, stop) without decoding each
 * (int64 statistics): returns the number of values (*lo, *hi set when there is one), or
 * TFR_RUN_SLOW when the run is not all shortest-form varints of at most 8 bytes (values
 * below 2^56: the usual run), or may be malformed, or the host is not little-endian; then
 * tfr_varint_run says what the run holds. Such varints compare as their bytes read as a
 * little-endian integer (a longer one has a nonzero last byte; within a length the last byte
 * is the most significant group), so only the two extremes are decoded. Word at a time at a
 * fixed stride, the varints in a word cut out as tfr_ends_table says: no load waits on the
 * length of the varint before it. */
static inline ptrdiff_t tfr_varint_run_range(const uint8_t *p, const uint8_t *stop, int64_t *lo, int64_t *hi) {
#ifdef TFR_SWAR
    ptrdiff_t count = 0;
    uint64_t mn = UINT64_MAX, mx = 0, bad = 0, carry = 0; /* carry: the open varint's bytes */
    unsigned open = 0, over = 0; /* the carry's bits; over: a varint of more than 8 bytes */
    for (; stop - p >= 8; p += 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        uint64_t ends = ~x & TFR_HI7;
        if (!ends) return TFR_RUN_SLOW; /* a varint of 9 or more bytes */
        /* a zero byte after a continuation byte ends a varint not in its shortest form */
        uint64_t zero = ~(((x & ~TFR_HI7) + ~TFR_HI7) | x) & TFR_HI7;
        bad |= zero & ((x << 8) | (uint64_t)(open != 0) << 7);
        const tfr_ends_entry *t = &tfr_ends_table[((ends >> 7) * 0x0102040810204080ull) >> 56];
        over |= (open + t->first_bits - 1) >> 6; /* its key is wrong then, and the run goes slow */
        uint64_t k = carry | ((x & t->first) << (open & 63));
        mn = k < mn ? k : mn;
        mx = k > mx ? k : mx;
        if (t->count > 1) {
            uint64_t k1 = (x >> t->shift[0]) & t->mask[0];
            uint64_t k2 = (x >> t->shift[1]) & t->mask[1];
            uint64_t k3 = (x >> t->shift[2]) & t->mask[2];
            uint64_t a = k1 < k2 ? k1 : k2, b = k1 < k2 ? k2 : k1;
            a = a < k3 ? a : k3;
            b = b > k3 ? b : k3;
            mn = a < mn ? a : mn;
            mx = b > mx ? b : mx;
            if (t->count > 4) { /* short varints: the ends past the fourth, one at a time */
                uint64_t rest = ends;
                for (int i = 0; i < 4; i++) rest &= rest - 1;
                unsigned from = t->shift[2] + (unsigned)__builtin_popcountll(t->mask[2]);
                while (rest) {
                    unsigned end = ((unsigned)__builtin_ctzll(rest) | 7) + 1; /* bits through the end byte */
                    uint64_t v = (x >> from) & (~0ull >> (64 - (end - from)));
                    mn = v < mn ? v : mn;
                    mx = v > mx ? v : mx;
                    from = end;
                    rest &= rest - 1;
                }
            }
        }
        count += t->count;
        carry = (x >> t->tail_shift) & t->tail_mask;
        open = t->tail_bits;
    }
    for (; p < stop; p++) { /* the last bytes, one at a time */
        if (open == 64) return TFR_RUN_SLOW;
        carry |= (uint64_t)*p << open;
        open += 8;
        if (*p < 0x80) {
            if (open > 8 && !*p) return TFR_RUN_SLOW;
            mn = carry < mn ? carry : mn;
            mx = carry > mx ? carry : mx;
            count++;
            carry = 0;
            open = 0;
        }
    }
    if (open || bad || over) return TFR_RUN_SLOW;
    if (count) {
        uint64_t two[2] = {mn & ~TFR_HI7, mx & ~TFR_HI7};
        for (int i = 0; i < 2; i++) { /* the 7-bit groups together: the value */
            uint64_t c = two[i];
            c = ((c & 0x7F007F007F007F00ull) >> 1) | (c & 0x007F007F007F007Full);
            c = ((c & 0x3FFF00003FFF0000ull) >> 2) | (c & 0x00003FFF00003FFFull);
            two[i] = ((c & 0x0FFFFFFF00000000ull) >> 4) | (c & 0x000000000FFFFFFFull);
        }
        *lo = (int64_t)two[0];
        *hi = (int64_t)two[1];
    }
    return count;
#else
    (void)p, (void)stop, (void)lo, (void)hi;
    return TFR_RUN_SLOW;
#endif
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

/* UTF-8 as upb checks proto3 strings (map keys) and Python's strict decoder accepts it: no
 * overlong forms, no surrogates, nothing past U+10FFFF. The ASCII prefix is taken inline. */
int tfr_utf8_valid_tail(const uint8_t *s, size_t n);
static inline int tfr_utf8_valid(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] >= 0x80) return tfr_utf8_valid_tail(s + i, n - i);
    return 1;
}

/* Skip the value of a field (already past its tag) of wire type `wt` in a message at `depth`.
 * Groups are walked to their matching end tag. 0 on success. */
int tfr_skip(const uint8_t **pp, const uint8_t *end, int wt, uint32_t field, int depth);

#endif
