/* `.tfindex` text parsing; the semantics are those of _engine._index_text.parse_index. */
#include "tfr_index.h"

#include <string.h>

static inline int is_blank(uint8_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

size_t tfr_index_max_pairs(const uint8_t *buf, size_t size) {
    size_t lines = 1;
    const uint8_t *p = buf, *end = buf + size;
    while (p < end && (p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        lines++;
        p++;
    }
    return lines;
}

/* One number at buf[*pos..): digits up to a non-digit. 0 ok, 1 no digit, 2 >= 2**63.
 * The first 18 digits cannot pass 2**63 - 1 (10**18 - 1 < 2**63), so only later digits pay
 * the exact overflow test (a division): a usual index line costs no division at all. */
static inline int parse_number(const uint8_t *buf, size_t size, size_t *pos, int64_t *value) {
    size_t i = *pos;
    uint64_t v = 0;
    int too_big = 0;
    if (i >= size || (unsigned)(buf[i] - '0') > 9) return 1;
    size_t fast_end = size - i > 18 ? i + 18 : size;
    for (; i < fast_end && (unsigned)(buf[i] - '0') <= 9; i++) v = v * 10 + (uint64_t)(buf[i] - '0');
    for (; i < size && (unsigned)(buf[i] - '0') <= 9; i++) {
        uint64_t d = (uint64_t)(buf[i] - '0');
        if (v > (UINT64_C(0x7fffffffffffffff) - d) / 10) too_big = 1; /* v * 10 + d > 2**63 - 1 */
        else v = v * 10 + d;
    }
    *pos = i;
    *value = (int64_t)v;
    return too_big ? 2 : 0;
}

/* Note entry n (offset, length) in the chain: the first overflow, a non-zero first offset, the
 * first gap (an offset other than the end of the entry before), as _index_text.index_starts. */
static inline void chain_add(tfr_index_chain *c, size_t n, int64_t offset, int64_t length) {
    int64_t end = (int64_t)((uint64_t)offset + (uint64_t)length); /* wraps as numpy's int64 add */
    if (end < 0 && !c->overflow.found) {
        c->overflow = (tfr_chain_fault){1, n, offset, length, 0};
    }
    if (n == 0 && offset != c->first_offset) c->not_at_zero = (tfr_chain_fault){1, 0, offset, length, 0};
    if (n > 0 && offset != c->end && !c->gap.found) c->gap = (tfr_chain_fault){1, n, offset, length, c->end};
    c->end = end;
}

size_t tfr_parse_index(const uint8_t *buf, size_t size, int64_t *starts, size_t cap, tfr_index_error *err,
                       tfr_index_chain *chain, int64_t first_offset) {
    size_t pos = 0, n = 0, line = 0;
    err->code = TFR_INDEX_OK;
    err->line = 0;
    err->line_start = 0;
    memset(chain, 0, sizeof(*chain));
    chain->first_offset = first_offset;
    while (pos < size) {
        size_t start = pos;
        line++;
        while (pos < size && is_blank(buf[pos])) pos++;
        if (pos == size || buf[pos] == '\n' || buf[pos] == '#') { /* blank or comment line */
            const uint8_t *nl = pos < size ? memchr(buf + pos, '\n', size - pos) : NULL;
            pos = nl ? (size_t)(nl - buf) + 1 : size;
            continue;
        }
        int64_t offset = 0, length = 0;
        int bad = parse_number(buf, size, &pos, &offset);
        int gap = 0;
        while (pos < size && is_blank(buf[pos])) { pos++; gap = 1; }
        int bad2 = gap ? parse_number(buf, size, &pos, &length) : 1;
        while (pos < size && is_blank(buf[pos])) pos++;
        int ended = pos == size || buf[pos] == '\n';
        if (bad == 1 || bad2 == 1 || !ended) {
            err->code = TFR_INDEX_NOT_PAIR;
        } else if (bad == 2 || bad2 == 2) {
            err->code = TFR_INDEX_TOO_BIG;
        } else if (n >= cap) {
            err->code = TFR_INDEX_FULL;
        }
        if (err->code != TFR_INDEX_OK) {
            err->line = line;
            err->line_start = start;
            return n;
        }
        starts[n] = offset;
        chain_add(chain, n, offset, length);
        n++;
        if (pos < size) pos++; /* the '\n' */
    }
    return n;
}
