/* Columns -> Example payloads (and frames). Sizes are computed first because every length
 * prefix precedes its message; then bytes are written once. */
#include "tfr_encode.h"

#include <stdlib.h>
#include <string.h>

#include "tfr_example.h"
#include "tfr_framing.h"

static inline size_t vsize(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) { v >>= 7; n++; }
    return n;
}

static inline uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) { *p++ = (uint8_t)(v | 0x80); v >>= 7; }
    *p++ = (uint8_t)v;
    return p;
}

int tfr_upb_key_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c) return c;
    return alen > blen ? -1 : (alen < blen ? 1 : 0);
}

static const tfr_enc_col *sort_base;
static int by_key(const void *x, const void *y) {
    const tfr_enc_col *a = &sort_base[*(const size_t *)x], *b = &sort_base[*(const size_t *)y];
    return tfr_upb_key_cmp(a->name, a->name_len, b->name, b->name_len);
}

/* Check a column's splits and offsets so the encoder never reads out of bounds. */
static int check_col(const tfr_enc_col *c, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (c->row_splits[i] < 0 || c->row_splits[i + 1] < c->row_splits[i]) return -1;
    int64_t last = c->row_splits[n];
    if (c->kind == TFR_KIND_BYTES) {
        if ((uint64_t)last > c->nvalues) return -1;
        for (size_t k = 0; k < c->nvalues; k++)
            if (c->value_offsets[k] < 0 || c->value_offsets[k + 1] < c->value_offsets[k]) return -1;
        if ((uint64_t)c->value_offsets[c->nvalues] > c->values_len) return -1;
    } else if ((uint64_t)last > c->values_len) {
        return -1;
    }
    return 0;
}

/* Size of the list message (BytesList/FloatList/Int64List) of record i. */
static size_t list_size(const tfr_enc_col *c, size_t i) {
    int64_t a = c->row_splits[i], b = c->row_splits[i + 1];
    if (a == b) return 0;
    size_t s = 0;
    if (c->kind == TFR_KIND_FLOAT) {
        s = 4 * (size_t)(b - a);
    } else if (c->kind == TFR_KIND_INT64) {
        const int64_t *v = (const int64_t *)c->values;
        for (int64_t k = a; k < b; k++) s += vsize((uint64_t)v[k]);
    } else {
        for (int64_t k = a; k < b; k++) {
            size_t len = (size_t)(c->value_offsets[k + 1] - c->value_offsets[k]);
            s += 1 + vsize(len) + len;
        }
        return s; /* bytes values are not packed */
    }
    return 1 + vsize(s) + s;
}

static size_t feature_size(const tfr_enc_col *c, size_t i, size_t *lsize) {
    if (c->status && c->status[i] == TFR_NO_KIND) { *lsize = 0; return 0; }
    *lsize = list_size(c, i);
    return 1 + vsize(*lsize) + *lsize;
}

static size_t entry_size(const tfr_enc_col *c, size_t fsize) {
    return 1 + vsize(c->name_len) + c->name_len + 1 + vsize(fsize) + fsize;
}

static uint8_t *write_list(uint8_t *p, const tfr_enc_col *c, size_t i) {
    int64_t a = c->row_splits[i], b = c->row_splits[i + 1];
    if (a == b) return p;
    if (c->kind == TFR_KIND_BYTES) {
        const uint8_t *base = (const uint8_t *)c->values;
        for (int64_t k = a; k < b; k++) {
            size_t len = (size_t)(c->value_offsets[k + 1] - c->value_offsets[k]);
            *p++ = 0x0A;
            p = put_varint(p, len);
            if (len) memcpy(p, base + c->value_offsets[k], len);
            p += len;
        }
    } else if (c->kind == TFR_KIND_FLOAT) {
        size_t s = 4 * (size_t)(b - a);
        *p++ = 0x0A;
        p = put_varint(p, s);
        memcpy(p, (const float *)c->values + a, s); /* little-endian hosts */
        p += s;
    } else {
        const int64_t *v = (const int64_t *)c->values;
        size_t s = 0;
        for (int64_t k = a; k < b; k++) s += vsize((uint64_t)v[k]);
        *p++ = 0x0A;
        p = put_varint(p, s);
        for (int64_t k = a; k < b; k++) p = put_varint(p, (uint64_t)v[k]);
    }
    return p;
}

int tfr_encode_examples(const tfr_enc_col *cols, size_t ncols, size_t n, int framed,
                        tfr_buf *out, tfr_buf *offsets, int *bad_col) {
    *bad_col = -1;
    for (size_t j = 0; j < ncols; j++)
        if (check_col(&cols[j], n)) { *bad_col = (int)j; return TFR_ENC_BAD_INPUT; }
    size_t k = ncols ? ncols : 1;
    size_t *order = (size_t *)malloc(k * sizeof(size_t));
    size_t *fsizes = (size_t *)malloc(k * sizeof(size_t));
    size_t *lsizes = (size_t *)malloc(k * sizeof(size_t));
    int rc = TFR_ENC_OK;
    if (!order || !fsizes || !lsizes) rc = TFR_ENC_NOMEM;
    if (rc == TFR_ENC_OK) {
        for (size_t j = 0; j < ncols; j++) order[j] = j;
        sort_base = cols; /* not reentrant; the binding holds the GIL */
        qsort(order, ncols, sizeof(size_t), by_key);
        if (!framed && tfr_buf_push_i64(offsets, 0)) rc = TFR_ENC_NOMEM;
    }
    for (size_t i = 0; i < n && rc == TFR_ENC_OK; i++) {
        size_t fs_total = 0;
        for (size_t t = 0; t < ncols; t++) {
            const tfr_enc_col *c = &cols[order[t]];
            if (c->status && c->status[i] == TFR_MISSING) continue;
            fsizes[t] = feature_size(c, i, &lsizes[t]);
            size_t e = entry_size(c, fsizes[t]);
            fs_total += 1 + vsize(e) + e;
        }
        size_t payload = 1 + vsize(fs_total) + fs_total;
        size_t need = payload + (framed ? TFR_FRAME_OVERHEAD : 0);
        if (i == 16 && n > 32) { /* size the output once from the first records: no doubling copies */
            size_t per = out->len / 16 + 1, more = per * (n - 16) + per * (n - 16) / 16;
            if (per < SIZE_MAX / (n + 1) && tfr_buf_reserve(out, more)) { rc = TFR_ENC_NOMEM; break; }
        }
        if (tfr_buf_reserve(out, need)) { rc = TFR_ENC_NOMEM; break; }
        uint8_t *start = out->data + out->len;
        uint8_t *pay = start + (framed ? TFR_HEADER_SIZE : 0), *p = pay;
        *p++ = 0x0A; /* Example.features */
        p = put_varint(p, fs_total);
        for (size_t t = 0; t < ncols; t++) {
            const tfr_enc_col *c = &cols[order[t]];
            if (c->status && c->status[i] == TFR_MISSING) continue;
            size_t f = fsizes[t];
            *p++ = 0x0A; /* Features.feature entry */
            p = put_varint(p, entry_size(c, f));
            *p++ = 0x0A; /* key */
            p = put_varint(p, c->name_len);
            memcpy(p, c->name, c->name_len);
            p += c->name_len;
            *p++ = 0x12; /* value */
            p = put_varint(p, f);
            if (f) {
                *p++ = (uint8_t)(c->kind << 3 | 2); /* Feature.bytes_list/float_list/int64_list */
                p = put_varint(p, lsizes[t]);
                p = write_list(p, c, i);
            }
        }
        if (framed) {
            tfr_write_header(start, payload);
            tfr_write_footer(pay + payload, pay, payload);
        }
        out->len += need;
        if (!framed && tfr_buf_push_i64(offsets, (int64_t)out->len)) rc = TFR_ENC_NOMEM;
    }
    free(order);
    free(fsizes);
    free(lsizes);
    return rc;
}
