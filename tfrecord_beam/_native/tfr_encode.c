/* Columns -> Example payloads (and frames). Sizes are computed first because every length
 * prefix precedes its message; then bytes are written once. */
#include "tfr_encode.h"

#include <stdlib.h>
#include <string.h>

#include "tfr_example.h"
#include "tfr_framing.h"

/* Bytes of v's varint, without a branch per 7 bits: ints of mixed widths (1-3 bytes at random)
 * made the loop's exit mispredict on most values of the sizes pass. */
static inline size_t vsize(uint64_t v) {
    return (size_t)(((64 - __builtin_clzll(v | 1)) * 9 + 64) >> 6);
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

/* Check the columns and sort them into upb's key order (`order`, ncols items; a stable sort
 * with no global state, so the binding may release the GIL). */
static int prepare(const tfr_enc_col *cols, size_t ncols, size_t n, size_t *order, size_t *scratch, int *bad_col) {
    *bad_col = -1;
    for (size_t j = 0; j < ncols; j++)
        if (check_col(&cols[j], n)) { *bad_col = (int)j; return TFR_ENC_BAD_INPUT; }
    tfr_key_order(cols, sizeof(tfr_enc_col), ncols, order, scratch);
    return TFR_ENC_OK;
}

/* Size of record i's Features message (the Example's field 1); sets fsizes[t] and lsizes[t]
 * (the Feature and list message sizes of the t-th column in key order). */
static size_t features_size(const tfr_enc_col *cols, const size_t *order, size_t ncols, size_t i, size_t *fsizes,
                            size_t *lsizes) {
    size_t fs_total = 0;
    for (size_t t = 0; t < ncols; t++) {
        const tfr_enc_col *c = &cols[order[t]];
        if (c->status && c->status[i] == TFR_MISSING) continue;
        fsizes[t] = feature_size(c, i, &lsizes[t]);
        size_t e = entry_size(c, fsizes[t]);
        fs_total += 1 + vsize(e) + e;
    }
    return fs_total;
}

/* The scratch arrays of one call: key order and per-column sizes. */
typedef struct {
    size_t *order, *fsizes, *lsizes, *sort;
} enc_scratch;

static int scratch_open(enc_scratch *s, size_t ncols) {
    size_t k = ncols ? ncols : 1;
    s->order = (size_t *)malloc(k * sizeof(size_t));
    s->fsizes = (size_t *)malloc(k * sizeof(size_t));
    s->lsizes = (size_t *)malloc(k * sizeof(size_t));
    s->sort = (size_t *)malloc(k * sizeof(size_t));
    return s->order && s->fsizes && s->lsizes && s->sort ? TFR_ENC_OK : TFR_ENC_NOMEM;
}

static void scratch_close(enc_scratch *s) {
    free(s->order);
    free(s->fsizes);
    free(s->lsizes);
    free(s->sort);
}

int tfr_example_lengths(const tfr_enc_col *cols, size_t ncols, size_t n, int64_t *lengths, int *bad_col) {
    enc_scratch s;
    int rc = scratch_open(&s, ncols);
    if (rc == TFR_ENC_OK) rc = prepare(cols, ncols, n, s.order, s.sort, bad_col);
    for (size_t i = 0; i < n && rc == TFR_ENC_OK; i++) {
        size_t fs_total = features_size(cols, s.order, ncols, i, s.fsizes, s.lsizes);
        lengths[i] = (int64_t)(1 + vsize(fs_total) + fs_total);
    }
    scratch_close(&s);
    return rc;
}

int tfr_encode_examples(const tfr_enc_col *cols, size_t ncols, size_t n, int framed,
                        tfr_buf *out, tfr_buf *offsets, int *bad_col) {
    enc_scratch s;
    int rc = scratch_open(&s, ncols);
    if (rc == TFR_ENC_OK) rc = prepare(cols, ncols, n, s.order, s.sort, bad_col);
    if (rc == TFR_ENC_OK && !framed && tfr_buf_push_i64(offsets, 0)) rc = TFR_ENC_NOMEM;
    const size_t *order = s.order, *fsizes = s.fsizes, *lsizes = s.lsizes;
    for (size_t i = 0; i < n && rc == TFR_ENC_OK; i++) {
        size_t fs_total = features_size(cols, order, ncols, i, s.fsizes, s.lsizes);
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
    scratch_close(&s);
    return rc;
}

/* ---- one record from a list of features ------------------------------------------------ */

typedef struct {
    const uint8_t *name;
    size_t name_len;
} named;

static inline const named *item_at(const void *items, size_t stride, size_t i) {
    return (const named *)(const void *)((const char *)items + i * stride);
}

void tfr_key_order(const void *items, size_t stride, size_t n, size_t *order, size_t *scratch) {
    for (size_t i = 0; i < n; i++) order[i] = i;
    /* bottom-up merge sort: stable, O(n log n), no global state */
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi) {
                const named *x = item_at(items, stride, order[a]), *y = item_at(items, stride, order[b]);
                scratch[k++] = tfr_upb_key_cmp(y->name, y->name_len, x->name, x->name_len) < 0 ? order[b++] : order[a++];
            }
            while (a < mid) scratch[k++] = order[a++];
            while (b < hi) scratch[k++] = order[b++];
        }
        memcpy(order, scratch, n * sizeof(size_t));
    }
}

/* Size of the list message (BytesList / FloatList / Int64List) of a feature; sets run_size
 * (the packed run's length, numbers only). */
static size_t value_list_size(tfr_feature *f) {
    f->run_size = 0;
    if (!f->count) return 0;
    size_t s = 0;
    if (f->kind == TFR_KIND_FLOAT) {
        s = 4 * f->count;
    } else if (f->kind == TFR_KIND_INT64) {
        const int64_t *v = (const int64_t *)f->values;
        for (size_t k = 0; k < f->count; k++) s += vsize((uint64_t)v[k]);
    } else {
        const tfr_bytes_ref *b = (const tfr_bytes_ref *)f->values;
        for (size_t k = 0; k < f->count; k++) s += 1 + vsize(b[k].len) + b[k].len;
        return s; /* bytes values are not packed */
    }
    f->run_size = s;
    return 1 + vsize(s) + s;
}

static size_t feature_message_size(tfr_feature *f) {
    f->list_size = value_list_size(f);
    f->size = 1 + vsize(f->list_size) + f->list_size;
    return f->size;
}

static uint8_t *write_feature_message(uint8_t *p, const tfr_feature *f) {
    *p++ = (uint8_t)(f->kind << 3 | 2); /* Feature.bytes_list / float_list / int64_list */
    p = put_varint(p, f->list_size);
    if (!f->count) return p;
    if (f->kind == TFR_KIND_BYTES) {
        const tfr_bytes_ref *b = (const tfr_bytes_ref *)f->values;
        for (size_t k = 0; k < f->count; k++) {
            *p++ = 0x0A;
            p = put_varint(p, b[k].len);
            if (b[k].len) memcpy(p, b[k].data, b[k].len);
            p += b[k].len;
        }
        return p;
    }
    *p++ = 0x0A; /* the packed `value` field */
    p = put_varint(p, f->run_size);
    if (f->kind == TFR_KIND_FLOAT) {
        memcpy(p, f->values, f->run_size); /* little-endian hosts */
        return p + f->run_size;
    }
    const int64_t *v = (const int64_t *)f->values;
    for (size_t k = 0; k < f->count; k++) p = put_varint(p, (uint64_t)v[k]);
    return p;
}

/* Size of a map entry {key: name, value: message of `value_size`} and of it as a field. */
static inline size_t entry_size_of(size_t name_len, size_t value_size) {
    return 1 + vsize(name_len) + name_len + 1 + vsize(value_size) + value_size;
}

static inline size_t field_size(size_t inner) { return 1 + vsize(inner) + inner; }

/* The Features message body (its map entries) of n features; sets their sizes. */
static size_t features_body_size(tfr_feature *f, size_t n) {
    size_t s = 0;
    for (size_t j = 0; j < n; j++) s += field_size(entry_size_of(f[j].name_len, feature_message_size(&f[j])));
    return s;
}

static uint8_t *write_entry_head(uint8_t *p, const uint8_t *name, size_t name_len, size_t value_size) {
    *p++ = 0x0A; /* map entry field (Features.feature / FeatureLists.feature_list) */
    p = put_varint(p, entry_size_of(name_len, value_size));
    *p++ = 0x0A; /* key */
    p = put_varint(p, name_len);
    if (name_len) memcpy(p, name, name_len);
    p += name_len;
    *p++ = 0x12; /* value */
    return put_varint(p, value_size);
}

static uint8_t *write_features_body(uint8_t *p, const tfr_feature *f, size_t n, const size_t *order) {
    for (size_t t = 0; t < n; t++) {
        const tfr_feature *x = &f[order[t]];
        p = write_entry_head(p, x->name, x->name_len, x->size);
        p = write_feature_message(p, x);
    }
    return p;
}

size_t tfr_example_size(tfr_feature *f, size_t n) { return field_size(features_body_size(f, n)); }

uint8_t *tfr_write_example(uint8_t *p, const tfr_feature *f, size_t n, const size_t *order) {
    size_t body = 0;
    for (size_t j = 0; j < n; j++) body += field_size(entry_size_of(f[j].name_len, f[j].size));
    *p++ = 0x0A; /* Example.features */
    p = put_varint(p, body);
    return write_features_body(p, f, n, order);
}

static size_t feature_list_size(tfr_feature_list *l) {
    size_t s = 0;
    for (size_t k = 0; k < l->nsteps; k++) s += field_size(feature_message_size(&l->steps[k]));
    l->size = s;
    return s;
}

static size_t lists_body_size(const tfr_feature_list *lists, size_t n) {
    size_t s = 0;
    for (size_t j = 0; j < n; j++) s += field_size(entry_size_of(lists[j].name_len, lists[j].size));
    return s;
}

size_t tfr_sequence_example_size(tfr_feature *ctx, size_t nctx, tfr_feature_list *lists, size_t nlists,
                                 int has_lists) {
    size_t s = field_size(features_body_size(ctx, nctx));
    for (size_t j = 0; j < nlists; j++) feature_list_size(&lists[j]);
    if (has_lists) s += field_size(lists_body_size(lists, nlists));
    return s;
}

uint8_t *tfr_write_sequence_example(uint8_t *p, const tfr_feature *ctx, size_t nctx, const size_t *ctx_order,
                                    const tfr_feature_list *lists, size_t nlists, const size_t *list_order,
                                    int has_lists) {
    p = tfr_write_example(p, ctx, nctx, ctx_order); /* SequenceExample.context: field 1, like Example.features */
    if (!has_lists) return p;
    *p++ = 0x12; /* SequenceExample.feature_lists */
    p = put_varint(p, lists_body_size(lists, nlists));
    for (size_t t = 0; t < nlists; t++) {
        const tfr_feature_list *l = &lists[list_order[t]];
        p = write_entry_head(p, l->name, l->name_len, l->size);
        for (size_t k = 0; k < l->nsteps; k++) {
            *p++ = 0x0A; /* FeatureList.feature */
            p = put_varint(p, l->steps[k].size);
            p = write_feature_message(p, &l->steps[k]);
        }
    }
    return p;
}
