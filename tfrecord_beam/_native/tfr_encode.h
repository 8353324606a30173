/* Columns -> serialized tf.train.Example, byte-identical to upb's deterministic serialization
 * (map keys in upb's order), optionally framed as TFRecords. Plain C, no Python. */
#ifndef TFR_ENCODE_H
#define TFR_ENCODE_H
#include <stddef.h>
#include <stdint.h>

#include "tfr_buf.h"

typedef struct {
    const uint8_t *name;
    size_t name_len;
    int kind;                     /* TFR_KIND_BYTES / FLOAT / INT64 */
    const void *values;           /* float32[] / int64[] / concatenated bytes */
    size_t values_len;            /* items (float/int64) or bytes (bytes) */
    const int64_t *value_offsets; /* bytes only: nvalues+1 offsets into values */
    size_t nvalues;               /* bytes only: number of values */
    const int64_t *row_splits;    /* n+1 */
    const uint8_t *status;        /* NULL: all present; else 0 missing (omitted), 1 no kind, 2 present */
} tfr_enc_col;

enum { TFR_ENC_OK = 0, TFR_ENC_BAD_INPUT = 1, TFR_ENC_NOMEM = 2 };

/* Encode n records. Unframed: payloads back to back in `out`, n+1 int64 offsets in `offsets`.
 * Framed: one TFRecord stream in `out` (offsets unused). Returns TFR_ENC_*; *bad_col names the
 * column whose splits or offsets are inconsistent. */
int tfr_encode_examples(const tfr_enc_col *cols, size_t ncols, size_t n, int framed,
                        tfr_buf *out, tfr_buf *offsets, int *bad_col);

/* The payload length of each of the n records tfr_encode_examples would write (lengths: n
 * int64), computed without writing them: a record is exactly the columns' Example when it is
 * this long and decodes to them. Same checks and return codes. */
int tfr_example_lengths(const tfr_enc_col *cols, size_t ncols, size_t n, int64_t *lengths, int *bad_col);

/* upb's map-key order: bytewise on the common prefix, then the LONGER key first. */
int tfr_upb_key_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen);

#endif

/* ---- one record from a list of features (the per-record writers) ------------------------ */

/* One bytes value. */
typedef struct {
    const uint8_t *data;
    size_t len;
} tfr_bytes_ref;

/* One feature of one record: `count` values of `kind` at `values` (float32[], int64[] or
 * tfr_bytes_ref[]). The sizes are filled in by the size functions. */
typedef struct {
    const uint8_t *name; /* map key (UTF-8, checked by the caller); unused for steps */
    size_t name_len;
    int kind;
    size_t count;
    const void *values;
    size_t size, list_size, run_size; /* filled in: Feature, list message, packed run sizes */
} tfr_feature;

/* One feature list of a SequenceExample: its steps, each a tfr_feature (names unused). */
typedef struct {
    const uint8_t *name;
    size_t name_len;
    tfr_feature *steps;
    size_t nsteps;
    size_t size; /* filled in: the FeatureList message's size */
} tfr_feature_list;

/* Sort `n` indices into upb's map-key order of the named items (each item starts with the
 * `name` and `name_len` fields, `stride` bytes apart); `scratch` holds n more indices. */
void tfr_key_order(const void *items, size_t stride, size_t n, size_t *order, size_t *scratch);

/* Size of the serialized Example holding `f` (sets every f[j].size). */
size_t tfr_example_size(tfr_feature *f, size_t n);
/* Write that Example at p (upb's deterministic bytes, keys in `order`); returns the end. */
uint8_t *tfr_write_example(uint8_t *p, const tfr_feature *f, size_t n, const size_t *order);

/* Size of the serialized SequenceExample with context `ctx` and `nlists` feature lists; the
 * feature_lists field is written only when `has_lists` (a SequenceExample built with an empty
 * map omits it). Sets every .size. */
size_t tfr_sequence_example_size(tfr_feature *ctx, size_t nctx, tfr_feature_list *lists, size_t nlists,
                                 int has_lists);
uint8_t *tfr_write_sequence_example(uint8_t *p, const tfr_feature *ctx, size_t nctx, const size_t *ctx_order,
                                    const tfr_feature_list *lists, size_t nlists, const size_t *list_order,
                                    int has_lists);
