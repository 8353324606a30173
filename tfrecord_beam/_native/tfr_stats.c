/* Per-feature statistics of Example batches (see tfr_stats.h for which records are taken).
 *
 * One walk per record: each map entry's statistics go to a scratch entry first and reach the
 * features only when the whole record is in the taken form, so a record that stops the walk
 * leaves nothing behind. Keys are looked up where the record before had them (writers repeat
 * one order), then in a hash table. Packed int64 runs give their range with tfr_varint_run_range
 * (tfr_varint_run, upb's rules, for the unusual ones); bytes values are checked as UTF-8 a word at a time while they are ASCII. */
#include "tfr_stats.h"

#include <string.h>

#include "tfr_example.h"
#include "tfr_wire.h"

enum { TAKEN = 1, OTHER = 0, NOMEM = -1 };

/* Widen the range [*lo, *hi] to [new_lo, new_hi]; `first`: there was none yet (take it whole). */
#define TAKE_RANGE(first, lo, hi, new_lo, new_hi) \
    do {                                          \
        if (first) {                              \
            (lo) = (new_lo);                      \
            (hi) = (new_hi);                      \
        } else {                                  \
            if ((new_lo) < (lo)) (lo) = (new_lo); \
            if ((new_hi) > (hi)) (hi) = (new_hi); \
        }                                         \
    } while (0)

/* Tags, one byte each, of the form taken: field number << 3 | wire type. */
enum {
    TAG_LEN1 = 0x0A,     /* field 1, length-delimited: Example.features, Features.feature, map key, lists' values */
    TAG_ENTRY_VALUE = 0x12, /* field 2, length-delimited: the map entry's Feature */
    TAG_VARINT1 = 0x08,  /* field 1, varint: an unpacked int64 */
    TAG_FIXED32_1 = 0x0D /* field 1, fixed32: an unpacked float */
};

static uint64_t name_hash(const uint8_t *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

/* Whether two names of n bytes are the same: short ones without a call (keys are short). */
static inline int same_name(const uint8_t *a, const uint8_t *b, size_t n) {
    if (n > 16) return memcmp(a, b, n) == 0;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static void table_put(uint32_t *table, size_t mask, uint64_t hash, uint32_t index) {
    size_t i = (size_t)hash & mask;
    while (table[i]) i = (i + 1) & mask;
    table[i] = index + 1;
}

static int table_grow(tfr_stats *st) {
    size_t size = st->table ? (st->table_mask + 1) * 2 : 64;
    uint32_t *table = (uint32_t *)calloc(size, sizeof(uint32_t));
    if (!table) return -1;
    for (size_t j = 0; j < st->count; j++) table_put(table, size - 1, st->features[j].hash, (uint32_t)j);
    free(st->table);
    st->table = table;
    st->table_mask = size - 1;
    return 0;
}

/* The index of the feature named [key, key + n), added when new (its name checked as UTF-8,
 * as upb checks map keys): -1 when the key is not UTF-8, -2 out of memory. */
static int64_t feature_index(tfr_stats *st, const uint8_t *key, size_t n) {
    uint64_t hash = name_hash(key, n);
    if (st->table) {
        for (size_t i = (size_t)hash & st->table_mask; st->table[i]; i = (i + 1) & st->table_mask) {
            const tfr_feature_stats *f = &st->features[st->table[i] - 1];
            if (f->hash == hash && f->name_len == n && same_name(f->name, key, n)) return st->table[i] - 1;
        }
    }
    if (!tfr_utf8_valid(key, n)) return -1;
    if (st->count >= UINT32_MAX - 1) return -2;
    if ((!st->table || (st->count + 1) * 2 > st->table_mask + 1) && table_grow(st)) return -2;
    if (st->count == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 16;
        tfr_feature_stats *grown = (tfr_feature_stats *)realloc(st->features, cap * sizeof *grown);
        if (!grown) return -2;
        st->features = grown;
        st->cap = cap;
    }
    tfr_feature_stats *f = &st->features[st->count];
    memset(f, 0, sizeof *f);
    f->name = key;
    f->name_len = n;
    f->hash = hash;
    f->sample_at = -1;
    f->last_record = -1;
    table_put(st->table, st->table_mask, hash, (uint32_t)st->count);
    return (int64_t)st->count++;
}

/* Whether [s, s + n) is UTF-8: eight bytes at a time while they are ASCII. */
static inline int is_text(const uint8_t *s, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ull) return tfr_utf8_valid(s + i, n - i);
    }
    return tfr_utf8_valid(s + i, n - i);
}

/* --- the lists of one Feature ---------------------------------------------------------- */

static int bytes_list(tfr_stats *st, tfr_entry_stats *e, const uint8_t *buffer, const uint8_t *p, const uint8_t *end) {
    while (p < end) {
        size_t n;
        if (*p++ != TAG_LEN1 || tfr_len(&p, end, &n)) return OTHER;
        int64_t len = (int64_t)n, at = (int64_t)(p - buffer);
        TAKE_RANGE(!e->values++, e->bytes_len_min, e->bytes_len_max, len, len);
        if (n && e->sample_at < 0) {
            e->sample_at = at;
            e->sample_len = len;
        }
        if (!is_text(p, n)) {
            int64_t triple[3] = {(int64_t)e->feature, at, len};
            if (tfr_buf_append(&st->not_utf8, triple, sizeof triple)) return NOMEM;
        }
        p += n;
    }
    return TAKEN;
}

static inline void float_values(tfr_entry_stats *e, const uint8_t *p, size_t n) {
    for (size_t k = 0; k < n; k += 4) {
        uint32_t bits;
        memcpy(&bits, p + k, 4);
#ifdef TFR_BIG_ENDIAN
        bits = __builtin_bswap32(bits);
#endif
        float v;
        memcpy(&v, &bits, 4);
        if (v != v) e->nan_count++;
        else TAKE_RANGE(!e->float_count++, e->float_min, e->float_max, v, v);
    }
    e->values += (int64_t)(n / 4);
}

static int float_list(tfr_entry_stats *e, const uint8_t *p, const uint8_t *end) {
    while (p < end) {
        uint8_t tag = *p++;
        size_t n;
        if (tag == TAG_LEN1) {
            if (tfr_len(&p, end, &n) || (n & 3)) return OTHER;
        } else if (tag == TAG_FIXED32_1) {
            if (end - p < 4) return OTHER;
            n = 4;
        } else {
            return OTHER;
        }
        float_values(e, p, n);
        p += n;
    }
    return TAKEN;
}

/* Count n > 0 int64 values from lo to hi into an entry. */
static inline void int_range(tfr_entry_stats *e, ptrdiff_t n, int64_t lo, int64_t hi) {
    TAKE_RANGE(!e->values, e->int_min, e->int_max, lo, hi);
    e->values += (int64_t)n;
}

/* Count n int64 values into an entry. */
static inline void int_values(tfr_entry_stats *e, const uint64_t *v, size_t n) {
    if (!n) return;
    int64_t lo = (int64_t)v[0], hi = lo;
    for (size_t k = 1; k < n; k++) {
        int64_t x = (int64_t)v[k];
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
    }
    int_range(e, (ptrdiff_t)n, lo, hi);
}

/* `readable`: the end of the record, up to which a packed run may be read ahead. */
static int int_list(tfr_stats *st, tfr_entry_stats *e, const uint8_t *p, const uint8_t *end, const uint8_t *readable) {
    while (p < end) {
        uint8_t tag = *p++;
        if (tag == TAG_LEN1) {
            size_t n;
            if (tfr_len(&p, end, &n)) return OTHER;
            int64_t lo = 0, hi = 0;
            ptrdiff_t count = tfr_varint_run_range(p, p + n, &lo, &hi);
            if (count >= 0) { /* the usual run: no value decoded but the extremes */
                if (count) int_range(e, count, lo, hi);
                p += n;
                continue;
            }
            st->ints.len = 0;
            if (tfr_buf_reserve(&st->ints, (n + 1) * 8)) return NOMEM;
            uint64_t *values = (uint64_t *)(void *)st->ints.data;
            count = tfr_varint_run(p, p + n, readable, values);
            if (count < 0) return OTHER;
            int_values(e, values, (size_t)count);
            p += n;
        } else if (tag == TAG_VARINT1) {
            uint64_t v;
            if (tfr_varint(&p, end, &v)) return OTHER;
            int_values(e, &v, 1);
        } else {
            return OTHER;
        }
    }
    return TAKEN;
}

/* --- a record ---------------------------------------------------------------------------- */

/* One map entry [p, end): exactly a key then a Feature of at most one kind holding one list. */
/* `readable`: the end of the record. */
static int entry(tfr_stats *st, const uint8_t *buffer, const uint8_t *p, const uint8_t *end, const uint8_t *readable,
                 int64_t record) {
    size_t klen, vlen;
    if (p >= end || *p++ != TAG_LEN1 || tfr_len(&p, end, &klen)) return OTHER;
    const uint8_t *key = p;
    p += klen;
    if (p >= end || *p++ != TAG_ENTRY_VALUE || tfr_len(&p, end, &vlen) || (size_t)(end - p) != vlen) return OTHER;
    size_t k = st->entry_count;
    int64_t j = -1;
    if (k < st->order_count) {
        const tfr_feature_stats *f = &st->features[st->order[k]];
        if (f->name_len == klen && same_name(f->name, key, klen)) j = st->order[k];
    }
    if (j < 0 && (j = feature_index(st, key, klen)) < 0) return j == -1 ? OTHER : NOMEM;
    tfr_feature_stats *f = &st->features[j];
    if (f->last_record == record) return OTHER; /* a key twice: protobuf keeps the last entry */
    f->last_record = record;
    if (k == st->entry_cap) {
        size_t cap = st->entry_cap ? st->entry_cap * 2 : 16;
        tfr_entry_stats *grown = (tfr_entry_stats *)realloc(st->entries, cap * sizeof *grown);
        if (!grown) return NOMEM;
        st->entries = grown;
        st->entry_cap = cap;
    }
    if (k >= st->order_cap) { /* where the next record's entry k is looked for first */
        uint32_t *grown = (uint32_t *)realloc(st->order, st->entry_cap * sizeof *grown);
        if (!grown) return NOMEM;
        st->order = grown;
        st->order_cap = st->entry_cap;
    }
    st->order[k] = (uint32_t)j; /* a hint only: a record not taken may leave it changed */
    tfr_entry_stats *e = &st->entries[k];
    e->feature = (uint32_t)j; /* the other fields are set when the first value comes */
    e->kind = TFR_KIND_NONE;
    e->values = e->float_count = e->nan_count = 0;
    e->sample_at = -1;
    st->entry_count++;
    if (p == end) return TAKEN; /* a Feature with no kind set */
    uint8_t tag = *p++;
    size_t n;
    if ((tag != 0x0A && tag != 0x12 && tag != 0x1A) || tfr_len(&p, end, &n) || (size_t)(end - p) != n) return OTHER;
    e->kind = tag >> 3; /* the oneof's field number is the kind */
    if (e->kind == TFR_KIND_BYTES) return bytes_list(st, e, buffer, p, end);
    if (e->kind == TFR_KIND_FLOAT) return float_list(e, p, end);
    return int_list(st, e, p, end, readable);
}

static int walk_record(tfr_stats *st, const uint8_t *buffer, const uint8_t *p, const uint8_t *end, int64_t record) {
    st->entry_count = 0;
    st->not_utf8.len = 0;
    while (p < end) { /* Example: field 1 (features), as often as it comes: protobuf merges them */
        size_t n;
        if (*p++ != TAG_LEN1 || tfr_len(&p, end, &n)) return OTHER;
        const uint8_t *features_end = p + n;
        while (p < features_end) { /* Features: field 1, its map entries */
            if (*p++ != TAG_LEN1 || tfr_len(&p, features_end, &n)) return OTHER;
            int rc = entry(st, buffer, p, p + n, end, record);
            if (rc != TAKEN) return rc;
            p += n;
        }
    }
    return TAKEN;
}

/* Count the walked record's entries into their features. */
static int commit(tfr_stats *st) {
    for (size_t k = 0; k < st->entry_count; k++) {
        const tfr_entry_stats *e = &st->entries[k];
        tfr_feature_stats *f = &st->features[e->feature];
        TAKE_RANGE(!f->records++, f->values_min, f->values_max, e->values, e->values);
        f->kinds[e->kind]++;
        f->values_total += e->values;
        if (!e->values) continue; /* no kind, or an empty list */
        if (e->kind == TFR_KIND_INT64) {
            TAKE_RANGE(!f->int_count, f->int_min, f->int_max, e->int_min, e->int_max);
            f->int_count += e->values;
        } else if (e->kind == TFR_KIND_FLOAT) {
            f->nan_count += e->nan_count;
            if (e->float_count) {
                TAKE_RANGE(!f->float_count, f->float_min, f->float_max, e->float_min, e->float_max);
                f->float_count += e->float_count;
            }
        } else {
            TAKE_RANGE(!f->bytes_count, f->bytes_len_min, f->bytes_len_max, e->bytes_len_min, e->bytes_len_max);
            f->bytes_count += e->values;
            if (f->sample_at < 0 && e->sample_at >= 0) {
                f->sample_at = e->sample_at;
                f->sample_len = e->sample_len;
            }
        }
    }
    const int64_t *odd = (const int64_t *)(const void *)st->not_utf8.data;
    for (size_t k = 0; k < st->not_utf8.len / 24; k++) {
        if (tfr_buf_append(&st->features[odd[3 * k]].not_utf8, odd + 3 * k + 1, 16)) return NOMEM;
    }
    st->order_count = st->entry_count;
    return TAKEN;
}

int tfr_stats_examples(tfr_stats *st, const uint8_t *buffer, size_t size, const int64_t *offsets,
                       const int64_t *lengths, size_t start, size_t n, size_t *taken) {
    size_t i = start;
    int rc = TFR_OK;
    for (; i < n; i++) {
        int64_t at = offsets[i], len = lengths[i];
        if (at < 0 || len < 0 || (uint64_t)at > size || (uint64_t)len > size - (uint64_t)at) {
            rc = TFR_STATS_BOUNDS;
            break;
        }
        int walked = walk_record(st, buffer, buffer + at, buffer + at + len, (int64_t)i);
        if (walked == TAKEN) walked = commit(st);
        if (walked == NOMEM) {
            rc = TFR_ERR_NOMEM;
            break;
        }
        if (walked == OTHER) break;
    }
    *taken = i - start;
    return rc;
}

void tfr_stats_free(tfr_stats *st) {
    for (size_t j = 0; j < st->count; j++) tfr_buf_free(&st->features[j].not_utf8);
    free(st->features);
    free(st->table);
    free(st->entries);
    free(st->order);
    tfr_buf_free(&st->not_utf8);
    tfr_buf_free(&st->ints);
    memset(st, 0, sizeof *st);
}
