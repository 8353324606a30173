/* Skipping unknown fields, groups included, as upb does. */
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
