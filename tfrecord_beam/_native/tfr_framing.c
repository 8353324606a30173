/* Frame scanning and writing; the semantics are those of the pure twin tfrecord_beam/_engine/_framing.py scan_frames. */
#include "tfr_framing.h"

#include "tfr_crc32c.h"

static inline uint64_t load_u64le(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline uint32_t load_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void store_u32le(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

size_t tfr_scan_frames(const uint8_t *buf, size_t size, int verify, int64_t max_records,
                       int64_t *offsets, int64_t *lengths, size_t cap, size_t *consumed, int *status) {
    size_t pos = 0, n = 0;
    *status = TFR_SCAN_OK;
    while (pos < size && (max_records < 0 || (int64_t)n < max_records) && n < cap) {
        size_t left = size - pos;
        if (left < TFR_HEADER_SIZE) { *status = TFR_SCAN_INCOMPLETE; break; }
        const uint8_t *h = buf + pos;
        uint64_t length = load_u64le(h);
        if (verify && tfr_masked_crc32c(h, 8) != load_u32le(h + 8)) { *status = TFR_SCAN_BAD_LENGTH_CRC; break; }
        if (left < TFR_FRAME_OVERHEAD || length > left - TFR_FRAME_OVERHEAD) { *status = TFR_SCAN_INCOMPLETE; break; }
        const uint8_t *payload = h + TFR_HEADER_SIZE;
        if (verify == TFR_VERIFY_ALL && tfr_masked_crc32c(payload, (size_t)length) != load_u32le(payload + length)) {
            *status = TFR_SCAN_BAD_DATA_CRC;
            break;
        }
        offsets[n] = (int64_t)(pos + TFR_HEADER_SIZE);
        lengths[n] = (int64_t)length;
        n++;
        pos += TFR_FRAME_OVERHEAD + (size_t)length;
    }
    *consumed = pos;
    return n;
}

int64_t tfr_find_length_crc(const uint8_t *buf, size_t size, size_t start) {
    for (size_t i = start; size >= TFR_HEADER_SIZE && i <= size - TFR_HEADER_SIZE; i++) {
        if (tfr_masked_crc32c(buf + i, 8) == load_u32le(buf + i + 8)) return (int64_t)i;
    }
    return -1;
}

size_t tfr_find_length_crcs(const uint8_t *buf, size_t size, size_t start, int64_t *out, size_t cap, size_t *next) {
    size_t n = 0, i = start;
    for (; n < cap && size >= TFR_HEADER_SIZE && i <= size - TFR_HEADER_SIZE; i++) {
        if (tfr_masked_crc32c(buf + i, 8) == load_u32le(buf + i + 8)) out[n++] = (int64_t)i;
    }
    *next = i;
    return n;
}

void tfr_write_header(uint8_t *out, uint64_t length) {
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(length >> (8 * i));
    store_u32le(out + 8, tfr_masked_crc32c(out, 8));
}

void tfr_write_footer(uint8_t *out, const uint8_t *payload, size_t length) {
    store_u32le(out, tfr_masked_crc32c(payload, length));
}

void tfr_walk_headers(const uint8_t *buf, size_t size, uint64_t base, uint64_t file_size, uint64_t *pos,
                      int64_t *offsets, int64_t *lengths, uint32_t *footers, size_t *n, size_t cap, int *footer_due,
                      int *status) {
    size_t k = *n;
    uint64_t p = *pos;
    *status = TFR_WALK_MORE;
    for (;;) {
        /* the footer of the record before the header at p: the 4 bytes before p */
        if (*footer_due && p >= base + TFR_FOOTER_SIZE && p - base <= size) {
            footers[k - 1] = load_u32le(buf + (p - base) - TFR_FOOTER_SIZE);
            *footer_due = 0;
        }
        if (!(k < cap && p >= base && p - base <= size && size - (p - base) >= TFR_HEADER_SIZE)) break;
        const uint8_t *h = buf + (p - base);
        uint64_t length = load_u64le(h);
        if (tfr_masked_crc32c(h, 8) != load_u32le(h + 8)) { *status = TFR_WALK_BAD_LENGTH_CRC; break; }
        if (file_size < p || file_size - p < TFR_FRAME_OVERHEAD || length > file_size - p - TFR_FRAME_OVERHEAD) {
            *status = TFR_WALK_PAST_END;
            break;
        }
        offsets[k] = (int64_t)p;
        lengths[k] = (int64_t)length;
        k++;
        *footer_due = 1;
        p += TFR_FRAME_OVERHEAD + length;
    }
    *pos = p;
    *n = k;
}
