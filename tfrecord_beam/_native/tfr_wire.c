/* Skipping unknown fields, groups included, as upb does; the UTF-8 check past an ASCII prefix. */
#include "tfr_wire.h"

int tfr_skip(const uint8_t **pp, const uint8_t *end, int wt, uint32_t field, int depth) {
    const uint8_t *p = *pp;
    uint64_t v;
    size_t n;
    switch (wt) {
        case WT_VARINT:
            if (tfr_varint(&p, end, &v)) return -1;
            break;
        case WT_FIXED64:
            if (end - p < 8) return -1;
            p += 8;
            break;
        case WT_FIXED32:
            if (end - p < 4) return -1;
            p += 4;
            break;
        case WT_LEN:
            if (tfr_len(&p, end, &n)) return -1;
            p += n;
            break;
        case WT_SGROUP: {
            if (depth + 1 > TFR_MAX_DEPTH) return -1;
            for (;;) {
                uint32_t f;
                int w;
                if (p >= end) return -1; /* unterminated group */
                if (tfr_tag(&p, end, &f, &w)) return -1;
                if (w == WT_EGROUP) {
                    if (f != field) return -1;
                    break;
                }
                if (tfr_skip(&p, end, w, f, depth + 1)) return -1;
            }
            break;
        }
        default: /* end group outside a group, wire types 6 and 7 */
            return -1;
    }
    *pp = p;
    return 0;
}

int tfr_utf8_valid_tail(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t need;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { need = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { need = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { need = 3; cp = c & 0x07; }
        else return 0;
        if (n - i <= need) return 0;
        for (size_t k = 1; k <= need; k++) {
            uint8_t d = s[i + k];
            if ((d & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (d & 0x3F);
        }
        if (need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;
        if (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
        i += need + 1;
    }
    return 1;
}

tfr_ends_entry tfr_ends_table[256];

/* A mask of the low `bytes` bytes (0 to 8). */
static uint64_t low_bytes(unsigned bytes) { return bytes ? ~0ull >> (64 - 8 * bytes) : 0; }

void tfr_wire_init(void) {
    for (unsigned m = 1; m < 256; m++) {
        tfr_ends_entry *t = &tfr_ends_table[m];
        unsigned ends[8], n = 0;
        for (unsigned i = 0; i < 8; i++)
            if (m >> i & 1) ends[n++] = i;
        t->count = (uint8_t)n;
        t->first = low_bytes(ends[0] + 1);
        t->first_bits = (uint8_t)(8 * (ends[0] + 1));
        for (unsigned k = 1; k <= 3; k++) {
            unsigned slot = k < n ? k : 1; /* fewer: the second again (only read when there is one) */
            unsigned from = slot < n ? ends[slot - 1] + 1 : 0, to = slot < n ? ends[slot] + 1 : 1;
            t->shift[k - 1] = (uint8_t)(8 * from);
            t->mask[k - 1] = low_bytes(to - from);
        }
        unsigned after = ends[n - 1] + 1; /* the bytes from here on start the next varint */
        t->tail_shift = (uint8_t)(8 * after & 63); /* after == 8: no bytes after, mask 0 */
        t->tail_mask = low_bytes(8 - after);
        t->tail_bits = (uint8_t)(8 * (8 - after));
    }
}
