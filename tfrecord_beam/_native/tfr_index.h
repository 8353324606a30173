/* `.tfindex` text -> (offset, length) pairs; plain C, no Python. The grammar is that of
 * tfrecord_beam._index_text_py.parse_index (the pure twin; see its docstring):
 * lines end at '\n' (the last may lack it); space, tab, '\r', '\v' and '\f' are blanks; a line
 * of blanks only, or whose first non-blank byte is '#', is skipped; every other line must be
 * blanks, digits, blanks, digits, blanks, both numbers below 2**63. */
#ifndef TFR_INDEX_H
#define TFR_INDEX_H
#include <stddef.h>
#include <stdint.h>

/* Error codes (same as _index_text_py.ERROR_*). */
enum { TFR_INDEX_OK = 0, TFR_INDEX_NOT_PAIR = 1, TFR_INDEX_TOO_BIG = 2 };
enum { TFR_INDEX_FULL = 3 }; /* `cap` pairs written before the end (C only) */

typedef struct {
    int code;          /* TFR_INDEX_* */
    size_t line;       /* 1-based line number of the bad line */
    size_t line_start; /* byte offset where that line starts */
} tfr_index_error;

/* An upper bound of the pairs buf[0..size) can hold (its lines), for sizing `out`. */
size_t tfr_index_max_pairs(const uint8_t *buf, size_t size);

/* Parse buf[0..size) into out[2*i], out[2*i+1] (offset, length) for at most `cap` pairs.
 * Returns the number of pairs; on a malformed line stops there with err->code != 0 (the
 * pairs before it are written). Passing cap >= tfr_index_max_pairs() never runs out. */
size_t tfr_parse_index(const uint8_t *buf, size_t size, int64_t *out, size_t cap, tfr_index_error *err);

#endif
