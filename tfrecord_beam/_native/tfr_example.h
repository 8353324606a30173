/* Columnar decode of serialized tf.train.Example / SequenceExample batches. Plain C, no Python.
 *
 * Results mirror upb (protobuf's C parser) on every input: a record upb rejects is an error
 * here, and a record upb accepts gives the values upb would give (packed or unpacked lists,
 * fields in any order, unknown fields skipped, repeated Features merged, duplicate map keys:
 * last wins, oneof set twice: last kind wins, a map entry holding an unknown field dropped,
 * map keys checked for UTF-8). */
#ifndef TFR_EXAMPLE_H
#define TFR_EXAMPLE_H
#include <stddef.h>
#include <stdint.h>

#include "tfr_buf.h"

/* Feature kinds: the field numbers of Feature's oneof. */
enum { TFR_KIND_NONE = 0, TFR_KIND_BYTES = 1, TFR_KIND_FLOAT = 2, TFR_KIND_INT64 = 3 };

/* Per-record status of a feature. */
enum { TFR_MISSING = 0, TFR_NO_KIND = 1, TFR_PRESENT = 2 };

/* Error codes. */
enum { TFR_OK = 0, TFR_ERR_MALFORMED = 1, TFR_ERR_KIND = 2, TFR_ERR_NOMEM = 3 };

typedef struct {
    const uint8_t *name;
    size_t name_len;
    int kind; /* TFR_KIND_BYTES / FLOAT / INT64 */
} tfr_desc;

/* One decoded feature. values: float32 / int64 items, or the concatenated bytes of bytes values
 * with value_offsets (int64, one per value plus a leading 0). row_splits (int64, n+1): record ->
 * values, or record -> steps for feature lists, whose step_splits (int64) map steps -> values.
 * status: one uint8 per record. All buffers are owned by the column (tfr_column_free). */
typedef struct {
    int kind;
    tfr_buf values;
    tfr_buf value_offsets;
    tfr_buf row_splits;
    tfr_buf step_splits;
    tfr_buf status;
    /* Set by the caller before decoding (bytes columns): instead of copying each bytes value,
     * store its address in the record (a uint64 in `values`); value_offsets then still count
     * the values' bytes as if they had been copied. The records must outlive the column. */
    int bytes_by_ref;
} tfr_column;

typedef struct {
    int code;        /* TFR_OK, TFR_ERR_* */
    int64_t record;  /* record number inside the batch */
    int feature;     /* feature index (KIND errors): context features first, then feature lists */
    int found_kind;  /* the kind found (KIND errors) */
} tfr_error;

/* Decode n Examples (record i = ptrs[i][0..lens[i])) into cols[0..nfeat), which must be zeroed.
 * Returns the error code (also in err). On error the columns hold partial data; free them. */
int tfr_decode_examples(const uint8_t *const *ptrs, const int64_t *lens, size_t n,
                        const tfr_desc *desc, size_t nfeat, tfr_column *cols, tfr_error *err);

/* Decode n SequenceExamples: context features into ccols (like Examples), feature lists into
 * scols (two levels of splits). */
int tfr_decode_sequence_examples(const uint8_t *const *ptrs, const int64_t *lens, size_t n,
                                 const tfr_desc *cdesc, size_t ncfeat, tfr_column *ccols,
                                 const tfr_desc *sdesc, size_t nsfeat, tfr_column *scols,
                                 tfr_error *err);

void tfr_column_free(tfr_column *c);

#endif
