/* Columnar decode of Example / SequenceExample batches (see tfr_example.h for the rules).
 *
 * One walk per record validates everything upb would validate and appends the values of the
 * described features straight into their columns. Whatever upb would later discard (a kind
 * replaced by another kind of the oneof, an entry replaced by a later duplicate key) is rolled
 * back by truncating the column to a mark taken before it was appended. */
#include "tfr_example.h"

#include <string.h>

#include "tfr_wire.h"

#define FAIL(code) return (code)
#define CHECK(x) do { int _rc = (x); if (_rc) return _rc; } while (0)

/* --- column helpers ------------------------------------------------------------------ */

/* Number of values in a column so far (shifts, not a division: this runs once per step). */
static inline int64_t col_count(const tfr_column *c) {
    if (c->kind == TFR_KIND_BYTES) return (int64_t)(c->value_offsets.len >> 3) - 1;
    return (int64_t)(c->values.len >> (c->kind == TFR_KIND_FLOAT ? 2 : 3));
}

typedef struct { size_t values, offsets, steps; } mark_t;

static mark_t col_mark(const tfr_column *c) {
    mark_t m = {c->values.len, c->value_offsets.len, c->step_splits.len};
    return m;
}

static void col_rollback(tfr_column *c, const mark_t *m) {
    c->values.len = m->values;
    c->value_offsets.len = m->offsets;
    c->step_splits.len = m->steps;
}

static int col_init(tfr_column *c, int kind, int with_steps) {
    c->kind = kind;
    if (tfr_buf_push_i64(&c->row_splits, 0)) return TFR_ERR_NOMEM;
    if (kind == TFR_KIND_BYTES && tfr_buf_push_i64(&c->value_offsets, 0)) return TFR_ERR_NOMEM;
    if (with_steps && tfr_buf_push_i64(&c->step_splits, 0)) return TFR_ERR_NOMEM;
    return TFR_OK;
}

void tfr_column_free(tfr_column *c) {
    tfr_buf_free(&c->values);
    tfr_buf_free(&c->value_offsets);
    tfr_buf_free(&c->row_splits);
    tfr_buf_free(&c->step_splits);
    tfr_buf_free(&c->status);
}

/* --- BytesList / FloatList / Int64List ------------------------------------------------ */

/* Parse a list message of `kind` at `depth`; append its values to `out` unless NULL. */
/* A packed run [p, stop) of float32 (length a multiple of 4) or int64 varints (each ending
 * inside the run); values appended to `out` unless NULL. `readable` (>= stop): the end of the
 * record, up to which bytes may be read ahead. */
static inline int packed_run(const uint8_t *p, const uint8_t *stop, const uint8_t *readable, int kind, tfr_column *out) {
    size_t n = (size_t)(stop - p);
    if (kind == TFR_KIND_FLOAT) {
        if (n & 3) FAIL(TFR_ERR_MALFORMED);
        if (out) {
            if (tfr_buf_append(&out->values, p, n)) FAIL(TFR_ERR_NOMEM);
#ifdef TFR_BIG_ENDIAN
            uint8_t *q = out->values.data + out->values.len - n;
            for (size_t k = 0; k < n; k += 4) { uint8_t t = q[k]; q[k] = q[k + 3]; q[k + 3] = t; t = q[k + 1]; q[k + 1] = q[k + 2]; q[k + 2] = t; }
#endif
        }
        return TFR_OK;
    }
    if (!out) return tfr_varint_run(p, stop, readable, NULL) < 0 ? TFR_ERR_MALFORMED : TFR_OK;
    if (!n) return TFR_OK;
    if (tfr_buf_reserve(&out->values, (n + 1) * 8)) FAIL(TFR_ERR_NOMEM);
    ptrdiff_t count = tfr_varint_run(p, stop, readable, (uint64_t *)(void *)(out->values.data + out->values.len));
    if (count < 0) FAIL(TFR_ERR_MALFORMED);
    out->values.len += (size_t)count * 8;
    return TFR_OK;
}

/* `readable`: the end of the record, up to which bytes may be read ahead. */
static int parse_list(const uint8_t *p, const uint8_t *end, const uint8_t *readable, int kind, int depth, tfr_column *out) {
    while (p < end) {
        uint32_t field;
        int wt;
        if (tfr_tag(&p, end, &field, &wt)) FAIL(TFR_ERR_MALFORMED);
        if (field != 1) {
            if (tfr_skip(&p, end, wt, field, depth)) FAIL(TFR_ERR_MALFORMED);
            continue;
        }
        if (kind == TFR_KIND_BYTES && wt == WT_LEN) {
            size_t n;
            if (tfr_len(&p, end, &n)) FAIL(TFR_ERR_MALFORMED);
            if (out && out->bytes_by_ref) {
                uint64_t at = (uint64_t)(uintptr_t)p;
                int64_t end_off = ((const int64_t *)(const void *)out->value_offsets.data)[out->value_offsets.len / 8 - 1];
                if (tfr_buf_append(&out->values, &at, 8)) FAIL(TFR_ERR_NOMEM);
                if (tfr_buf_push_i64(&out->value_offsets, end_off + (int64_t)n)) FAIL(TFR_ERR_NOMEM);
            } else if (out) {
                if (tfr_buf_append(&out->values, p, n)) FAIL(TFR_ERR_NOMEM);
                if (tfr_buf_push_i64(&out->value_offsets, (int64_t)out->values.len)) FAIL(TFR_ERR_NOMEM);
            }
            p += n;
        } else if (kind != TFR_KIND_BYTES && wt == WT_LEN) { /* packed float / int64 */
            size_t n;
            if (tfr_len(&p, end, &n)) FAIL(TFR_ERR_MALFORMED);
            CHECK(packed_run(p, p + n, readable, kind, out));
            p += n;
        } else if (kind == TFR_KIND_FLOAT && wt == WT_FIXED32) {
            if (end - p < 4) FAIL(TFR_ERR_MALFORMED);
            CHECK(packed_run(p, p + 4, readable, kind, out)); /* one value reads like a run of one */
            p += 4;
        } else if (kind == TFR_KIND_INT64 && wt == WT_VARINT) {
            uint64_t v;
            if (tfr_varint(&p, end, &v)) FAIL(TFR_ERR_MALFORMED);
            if (out && tfr_buf_append(&out->values, &v, 8)) FAIL(TFR_ERR_NOMEM);
        } else {
            if (tfr_skip(&p, end, wt, field, depth)) FAIL(TFR_ERR_MALFORMED);
        }
    }
    return TFR_OK;
}

/* --- Feature (oneof kind) ------------------------------------------------------------ */

/* Parse a Feature at `depth`, merging into the state (*kind, col): a new kind of the oneof
 * discards what earlier kinds appended (rollback to *m); values of kind `want` go to col. */
static int parse_feature(const uint8_t *p, const uint8_t *end, const uint8_t *readable, int depth, int *kind,
                         int want, tfr_column *col, const mark_t *m) {
    /* Fast path for what writers produce: one float/int64 list holding one packed run. */
    if (end - p >= 4 && (p[0] == 0x12 || p[0] == 0x1A) && p[1] < 0x80 && (ptrdiff_t)p[1] == end - p - 2 &&
        p[2] == 0x0A && p[3] < 0x80 && (ptrdiff_t)p[3] == end - p - 4) {
        int k = p[0] >> 3;
        if (*kind != k) {
            if (col) col_rollback(col, m);
            *kind = k;
        }
        return packed_run(p + 4, end, readable, k, (col && k == want) ? col : NULL);
    }
    while (p < end) {
        uint32_t field;
        int wt;
        if (tfr_tag(&p, end, &field, &wt)) FAIL(TFR_ERR_MALFORMED);
        if (field >= 1 && field <= 3 && wt == WT_LEN) {
            size_t n;
            if (tfr_len(&p, end, &n)) FAIL(TFR_ERR_MALFORMED);
            if (*kind != (int)field) {
                if (col) col_rollback(col, m);
                *kind = (int)field;
            }
            CHECK(parse_list(p, p + n, readable, (int)field, depth + 1, (col && (int)field == want) ? col : NULL));
            p += n;
        } else if (tfr_skip(&p, end, wt, field, depth)) {
            FAIL(TFR_ERR_MALFORMED);
        }
    }
    return TFR_OK;
}

/* --- map entries (Features.feature, FeatureLists.feature_list) ------------------------ */

typedef struct {
    const tfr_desc *desc;
    size_t nfeat;
    tfr_column *cols;
    int *found;    /* per feature: an entry was kept in this record */
    int *kind;     /* per feature: Feature kind (Example / context) */
    int *bad_kind; /* per feature: a step of another kind (feature lists) */
    mark_t *marks; /* per feature: column state at the start of the record */
    size_t hint;   /* next feature to try first: keys usually come in the same order */
    const uint8_t *readable; /* end of the record being decoded */
} fstate;

static int lookup(fstate *st, const uint8_t *key, size_t klen) {
    for (size_t t = 0; t < st->nfeat; t++) {
        size_t j = st->hint + t;
        if (j >= st->nfeat) j -= st->nfeat;
        const tfr_desc *d = &st->desc[j];
        if (d->name_len == klen && memcmp(d->name, key, klen) == 0) {
            st->hint = j + 1 == st->nfeat ? 0 : j + 1;
            return (int)j;
        }
    }
    return -1;
}

/* Walk an entry's own fields: the last key, and whether any field other than key (1) and
 * value (2) is there (upb then drops the whole entry). */
static int entry_header(const uint8_t *p, const uint8_t *end, int depth, const uint8_t **key,
                        size_t *klen, int *unknown) {
    *key = p;
    *klen = 0;
    *unknown = 0;
    while (p < end) {
        uint32_t field;
        int wt;
        if (tfr_tag(&p, end, &field, &wt)) FAIL(TFR_ERR_MALFORMED);
        if ((field == 1 || field == 2) && wt == WT_LEN) {
            size_t n;
            if (tfr_len(&p, end, &n)) FAIL(TFR_ERR_MALFORMED);
            if (field == 1) {
                if (!tfr_utf8_valid(p, n)) FAIL(TFR_ERR_MALFORMED);
                *key = p;
                *klen = n;
            }
            p += n;
        } else {
            *unknown = 1;
            if (tfr_skip(&p, end, wt, field, depth)) FAIL(TFR_ERR_MALFORMED);
        }
    }
    return TFR_OK;
}

/* Next value (field 2) of an entry whose header already parsed: [*vp, *vend). 1 when found. */
static int entry_next_value(const uint8_t **pp, const uint8_t *end, const uint8_t **vp, const uint8_t **vend) {
    const uint8_t *p = *pp;
    while (p < end) {
        uint32_t field = 0;
        int wt = 0;
        tfr_tag(&p, end, &field, &wt); /* already validated by entry_header */
        if ((field == 1 || field == 2) && wt == WT_LEN) {
            size_t n = 0;
            tfr_len(&p, end, &n);
            if (field == 2) {
                *vp = p;
                *vend = p + n;
                *pp = p + n;
                return 1;
            }
            p += n;
        } else {
            tfr_skip(&p, end, wt, field, 0);
        }
    }
    *pp = p;
    return 0;
}

/* The layout every writer uses: key (1-byte length) then one value, nothing else. Returns 1
 * and the spans when the entry is exactly that; 0 sends the caller to the general walk. */
static inline int entry_simple(const uint8_t *p, const uint8_t *end, const uint8_t **key, size_t *klen,
                               const uint8_t **vp) {
    if (end - p < 4 || p[0] != 0x0A || p[1] >= 0x80 || (size_t)p[1] > (size_t)(end - p) - 3) return 0;
    const uint8_t *q = p + 2 + p[1];
    if (*q != 0x12) return 0;
    q++;
    uint64_t vlen;
    if (tfr_varint(&q, end, &vlen) || vlen != (uint64_t)(end - q)) return 0;
    if (!tfr_utf8_valid(p + 2, p[1])) return 0; /* the general walk reports it */
    *key = p + 2;
    *klen = p[1];
    *vp = q;
    return 1;
}

/* Map values: a Feature (Features map) or a FeatureList (FeatureLists map) at depth 3, for
 * feature j (-1: an entry no one asked for, or one upb drops: validate only). */
typedef int (*value_fn)(const uint8_t *p, const uint8_t *end, fstate *st, int j);

static int feature_value(const uint8_t *p, const uint8_t *end, fstate *st, int j) {
    if (j < 0) {
        int dummy = TFR_KIND_NONE;
        return parse_feature(p, end, st->readable, 3, &dummy, 0, NULL, NULL);
    }
    return parse_feature(p, end, st->readable, 3, &st->kind[j], st->desc[j].kind, &st->cols[j], &st->marks[j]);
}

/* A FeatureList: each Feature is one step; a step of another kind is remembered for the
 * record's kind check (only the entry that survives counts). */
static int feature_list_value(const uint8_t *q, const uint8_t *end, fstate *st, int j) {
    tfr_column *col = j >= 0 ? &st->cols[j] : NULL;
    int want = j >= 0 ? st->desc[j].kind : 0;
    while (q < end) {
        uint32_t field;
        int wt;
        if (tfr_tag(&q, end, &field, &wt)) FAIL(TFR_ERR_MALFORMED);
        if (field == 1 && wt == WT_LEN) {
            size_t n;
            if (tfr_len(&q, end, &n)) FAIL(TFR_ERR_MALFORMED);
            int step_kind = TFR_KIND_NONE;
            mark_t sm;
            if (col) sm = col_mark(col);
            CHECK(parse_feature(q, q + n, st->readable, 4, &step_kind, want, col, col ? &sm : NULL));
            q += n;
            if (col) {
                if (step_kind != TFR_KIND_NONE && step_kind != want && !st->bad_kind[j]) st->bad_kind[j] = step_kind;
                if (tfr_buf_push_i64(&col->step_splits, col_count(col))) FAIL(TFR_ERR_NOMEM);
            }
        } else if (tfr_skip(&q, end, wt, field, 3)) {
            FAIL(TFR_ERR_MALFORMED);
        }
    }
    return TFR_OK;
}

/* One map entry at depth 2: find its key (fast path for the usual layout), start feature j
 * afresh (a duplicate key replaces the earlier entry), then feed each value to `value`. */
static int map_entry(const uint8_t *p, const uint8_t *end, fstate *st, value_fn value) {
    const uint8_t *key, *vp, *vend;
    size_t klen;
    int unknown = 0, simple = entry_simple(p, end, &key, &klen, &vp);
    if (!simple) CHECK(entry_header(p, end, 2, &key, &klen, &unknown));
    int j = unknown ? -1 : lookup(st, key, klen);
    if (j >= 0) {
        col_rollback(&st->cols[j], &st->marks[j]);
        st->found[j] = 1;
        st->kind[j] = TFR_KIND_NONE;
        st->bad_kind[j] = TFR_KIND_NONE;
    }
    if (simple) return value(vp, end, st, j);
    while (entry_next_value(&p, end, &vp, &vend)) CHECK(value(vp, vend, st, j));
    return TFR_OK;
}

/* A map message (Features or FeatureLists) at depth 1: entries are field 1. */
static int parse_map(const uint8_t *p, const uint8_t *end, fstate *st, value_fn value) {
    while (p < end) {
        uint32_t field;
        int wt;
        if (tfr_tag(&p, end, &field, &wt)) FAIL(TFR_ERR_MALFORMED);
        if (field == 1 && wt == WT_LEN) {
            size_t n;
            if (tfr_len(&p, end, &n)) FAIL(TFR_ERR_MALFORMED);
            CHECK(map_entry(p, p + n, st, value));
            p += n;
        } else if (tfr_skip(&p, end, wt, field, 1)) {
            FAIL(TFR_ERR_MALFORMED);
        }
    }
    return TFR_OK;
}

/* --- per-record bookkeeping ----------------------------------------------------------- */

/* Reserve room for n records' statuses and splits up front. */
static int reserve_records(fstate *st, size_t n) {
    for (size_t j = 0; j < st->nfeat; j++) {
        if (tfr_buf_reserve(&st->cols[j].status, n) || tfr_buf_reserve(&st->cols[j].row_splits, n * 8))
            return TFR_ERR_NOMEM;
    }
    return TFR_OK;
}

/* After `done` of n records, grow each buffer once to the size the rest will likely need, so
 * big values (images) are not copied again and again by doubling. */
static int reserve_estimate(fstate *st, size_t done, size_t n) {
    for (size_t j = 0; j < st->nfeat; j++) {
        tfr_buf *bufs[3] = {&st->cols[j].values, &st->cols[j].value_offsets, &st->cols[j].step_splits};
        for (int b = 0; b < 3; b++) {
            size_t per = bufs[b]->len / done + 1;
            if (per > SIZE_MAX / (n + 1)) continue;
            size_t want = per * (n - done) + per * (n - done) / 16;
            if (want > bufs[b]->cap - bufs[b]->len && tfr_buf_reserve(bufs[b], want)) return TFR_ERR_NOMEM;
        }
    }
    return TFR_OK;
}

static int state_open(fstate *st, const tfr_desc *desc, size_t nfeat, tfr_column *cols, int steps) {
    memset(st, 0, sizeof *st);
    st->desc = desc;
    st->nfeat = nfeat;
    st->cols = cols;
    size_t k = nfeat ? nfeat : 1;
    st->found = (int *)calloc(k, sizeof(int));
    st->kind = (int *)calloc(k, sizeof(int));
    st->bad_kind = (int *)calloc(k, sizeof(int));
    st->marks = (mark_t *)calloc(k, sizeof(mark_t));
    if (!st->found || !st->kind || !st->bad_kind || !st->marks) return TFR_ERR_NOMEM;
    for (size_t j = 0; j < nfeat; j++) CHECK(col_init(&cols[j], desc[j].kind, steps));
    return TFR_OK;
}

static void state_close(fstate *st) {
    free(st->found);
    free(st->kind);
    free(st->bad_kind);
    free(st->marks);
}

static void record_begin(fstate *st) {
    for (size_t j = 0; j < st->nfeat; j++) {
        st->found[j] = 0;
        st->kind[j] = TFR_KIND_NONE;
        st->bad_kind[j] = TFR_KIND_NONE;
        st->marks[j] = col_mark(&st->cols[j]);
    }
}

/* Close a record: status, kind check, row split. `steps`: feature lists (splits over steps). */
static int record_end(fstate *st, int steps, int64_t record, int feature_base, tfr_error *err) {
    for (size_t j = 0; j < st->nfeat; j++) {
        tfr_column *c = &st->cols[j];
        uint8_t s;
        int bad = steps ? st->bad_kind[j] : (st->kind[j] != TFR_KIND_NONE && st->kind[j] != c->kind ? st->kind[j] : 0);
        if (st->found[j] && bad) {
            err->code = TFR_ERR_KIND;
            err->record = record;
            err->feature = feature_base + (int)j;
            err->found_kind = bad;
            return TFR_ERR_KIND;
        }
        if (!st->found[j]) s = TFR_MISSING;
        else if (!steps && st->kind[j] == TFR_KIND_NONE) s = TFR_NO_KIND;
        else s = TFR_PRESENT;
        if (tfr_buf_append(&c->status, &s, 1)) return TFR_ERR_NOMEM;
        int64_t split = steps ? (int64_t)(c->step_splits.len / 8) - 1 : col_count(c);
        if (tfr_buf_push_i64(&c->row_splits, split)) return TFR_ERR_NOMEM;
    }
    return TFR_OK;
}

static int set_err(tfr_error *err, int code, int64_t record) {
    err->code = code;
    err->record = record;
    err->feature = -1;
    err->found_kind = 0;
    return code;
}

#define ESTIMATE_AFTER 16

/* --- entry points --------------------------------------------------------------------- */

int tfr_decode_examples(const uint8_t *const *ptrs, const int64_t *lens, size_t n,
                        const tfr_desc *desc, size_t nfeat, tfr_column *cols, tfr_error *err) {
    fstate st;
    int rc = state_open(&st, desc, nfeat, cols, 0);
    if (rc == TFR_OK) rc = reserve_records(&st, n);
    set_err(err, rc, -1);
    for (size_t i = 0; i < n && rc == TFR_OK; i++) {
        const uint8_t *p = ptrs[i], *end = p + lens[i];
        if (i == ESTIMATE_AFTER && n > 2 * ESTIMATE_AFTER && (rc = reserve_estimate(&st, i, n))) break;
        record_begin(&st);
        st.readable = end;
        while (p < end && rc == TFR_OK) { /* Example at depth 0: features is field 1 */
            uint32_t field;
            int wt;
            if (tfr_tag(&p, end, &field, &wt)) { rc = TFR_ERR_MALFORMED; break; }
            if (field == 1 && wt == WT_LEN) {
                size_t len;
                if (tfr_len(&p, end, &len)) { rc = TFR_ERR_MALFORMED; break; }
                rc = parse_map(p, p + len, &st, feature_value);
                p += len;
            } else if (tfr_skip(&p, end, wt, field, 0)) {
                rc = TFR_ERR_MALFORMED;
            }
        }
        if (rc == TFR_OK) rc = record_end(&st, 0, (int64_t)i, 0, err);
        if (rc != TFR_OK && rc != TFR_ERR_KIND) set_err(err, rc, (int64_t)i);
    }
    state_close(&st);
    return rc;
}

int tfr_decode_sequence_examples(const uint8_t *const *ptrs, const int64_t *lens, size_t n,
                                 const tfr_desc *cdesc, size_t ncfeat, tfr_column *ccols,
                                 const tfr_desc *sdesc, size_t nsfeat, tfr_column *scols,
                                 tfr_error *err) {
    fstate cst, sst;
    int rc = state_open(&cst, cdesc, ncfeat, ccols, 0);
    int rc2 = state_open(&sst, sdesc, nsfeat, scols, 1);
    if (rc == TFR_OK) rc = rc2;
    if (rc == TFR_OK) rc = reserve_records(&cst, n);
    if (rc == TFR_OK) rc = reserve_records(&sst, n);
    set_err(err, rc, -1);
    for (size_t i = 0; i < n && rc == TFR_OK; i++) {
        const uint8_t *p = ptrs[i], *end = p + lens[i];
        if (i == ESTIMATE_AFTER && n > 2 * ESTIMATE_AFTER) {
            if ((rc = reserve_estimate(&cst, i, n)) || (rc = reserve_estimate(&sst, i, n))) break;
        }
        record_begin(&cst);
        record_begin(&sst);
        cst.readable = sst.readable = end;
        while (p < end && rc == TFR_OK) { /* context = 1, feature_lists = 2 */
            uint32_t field;
            int wt;
            if (tfr_tag(&p, end, &field, &wt)) { rc = TFR_ERR_MALFORMED; break; }
            if ((field == 1 || field == 2) && wt == WT_LEN) {
                size_t len;
                if (tfr_len(&p, end, &len)) { rc = TFR_ERR_MALFORMED; break; }
                rc = field == 1 ? parse_map(p, p + len, &cst, feature_value)
                                : parse_map(p, p + len, &sst, feature_list_value);
                p += len;
            } else if (tfr_skip(&p, end, wt, field, 0)) {
                rc = TFR_ERR_MALFORMED;
            }
        }
        if (rc == TFR_OK) rc = record_end(&cst, 0, (int64_t)i, 0, err);
        if (rc == TFR_OK) rc = record_end(&sst, 1, (int64_t)i, (int)ncfeat, err);
        if (rc != TFR_OK && rc != TFR_ERR_KIND) set_err(err, rc, (int64_t)i);
    }
    state_close(&cst);
    state_close(&sst);
    return rc;
}
