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

/* One number at buf[*pos..): digits up to a non-digit. 0 ok, 1 no digit, 2 >= 2**63. */
static inline int parse_number(const uint8_t *buf, size_t size, size_t *pos, int64_t *value) {
    size_t i = *pos;
    uint64_t v = 0;
    int too_big = 0;
    if (i >= size || (unsigned)(buf[i] - '0') > 9) return 1;
    for (; i < size && (unsigned)(buf[i] - '0') <= 9; i++) {
        uint64_t d = (uint64_t)(buf[i] - '0');
        if (v > (UINT64_C(0x7fffffffffffffff) - d) / 10) too_big = 1; /* v * 10 + d > 2**63 - 1 */
        else v = v * 10 + d;
    }
    *pos = i;
    *value = (int64_t)v;
    return too_big ? 2 : 0;
}

size_t tfr_parse_index(const uint8_t *buf, size_t size, int64_t *out, size_t cap, tfr_index_error *err) {
    size_t pos = 0, n = 0, line = 0;
    err->code = TFR_INDEX_OK;
    err->line = 0;
    err->line_start = 0;
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
        out[2 * n] = offset;
        out[2 * n + 1] = length;
        n++;
        if (pos < size) pos++; /* the '\n' */
    }
    return n;
}
