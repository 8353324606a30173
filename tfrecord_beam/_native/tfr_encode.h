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

/* upb's map-key order: bytewise on the common prefix, then the LONGER key first. */
int tfr_upb_key_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen);

#endif
