/* Per-feature statistics of a batch of Examples without decoding them into columns: what
 * `tfrecord-beam inspect` and `schema` report (kinds, values per record, numeric ranges, bytes
 * lengths, which bytes values are not UTF-8, a sample). Plain C, no Python.
 *
 * Only records in the form writers produce are taken: an Example whose field 1 holds map
 * entries of a key then a Feature, each Feature of at most one kind holding one list, lists
 * packed or not, each key once per record. At the first record in any other form (a
 * SequenceExample, unknown fields, a duplicate key, a oneof set twice, anything upb would
 * reject) the walk stops before it, so that the caller takes that record the exact way
 * (protobuf) and asks again from the next one: a record is counted whole or not at all. */
#ifndef TFR_STATS_H
#define TFR_STATS_H
#include <stddef.h>
#include <stdint.h>

#include "tfr_buf.h"

/* One feature's statistics over the records taken. Offsets are from the batch's buffer. */
typedef struct {
    const uint8_t *name;
    size_t name_len;
    uint64_t hash;
    int64_t records;                    /* records holding the feature */
    int64_t kinds[4];                   /* Feature messages by TFR_KIND_* (NONE: no kind set) */
    int64_t values_min, values_max, values_total; /* values per record holding it */
    int64_t int_count, int_min, int_max;
    int64_t float_count, nan_count;     /* float values that are not NaN, and NaN ones */
    float float_min, float_max;         /* over the values that are not NaN */
    int64_t bytes_count, bytes_len_min, bytes_len_max;
    int64_t sample_at, sample_len;      /* the first non-empty bytes value; -1 when none */
    tfr_buf not_utf8;                   /* (offset, length) int64 pairs of values not UTF-8 */
    int64_t last_record;                /* the last record holding it (duplicate keys) */
} tfr_feature_stats;

/* One map entry of the record being walked, counted only when the whole record is taken. */
typedef struct {
    uint32_t feature;
    int kind;
    int64_t values;
    int64_t int_min, int_max, float_count, nan_count, bytes_len_min, bytes_len_max;
    float float_min, float_max;
    int64_t sample_at, sample_len;
} tfr_entry_stats;

typedef struct {
    tfr_feature_stats *features;
    size_t count, cap;
    uint32_t *table; /* open addressing: feature index + 1, 0 empty; size table_mask + 1 */
    size_t table_mask;
    tfr_entry_stats *entries; /* the record being walked */
    size_t entry_count, entry_cap;
    uint32_t *order;          /* feature of each entry of the record before: keys repeat in order */
    size_t order_count, order_cap;
    tfr_buf not_utf8;         /* (feature, offset, length) int64 triples of the record being walked */
    tfr_buf ints;             /* a packed int64 run, decoded */
} tfr_stats;

/* TFR_OK, TFR_ERR_NOMEM, or TFR_STATS_BOUNDS: record *taken's offset and length lie outside
 * the buffer. */
enum { TFR_STATS_BOUNDS = 4 };

/* Take records start, start + 1, ... of buffer (record i: offsets[i], lengths[i]) into st
 * (zeroed before the first call) until one is in another form or all n are taken; *taken:
 * how many were taken from start. */
int tfr_stats_examples(tfr_stats *st, const uint8_t *buffer, size_t size, const int64_t *offsets,
                       const int64_t *lengths, size_t start, size_t n, size_t *taken);

void tfr_stats_free(tfr_stats *st);

#endif
