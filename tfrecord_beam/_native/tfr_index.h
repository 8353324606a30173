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

/* A fault of the chain of entries (each must start where the one before ends, the first at 0). */
typedef struct {
    int found;
    size_t entry;          /* 0-based entry number */
    int64_t offset, length;
    int64_t previous_end;  /* (gaps) where the entry before ends */
} tfr_chain_fault;

typedef struct {
    tfr_chain_fault overflow;    /* the first entry whose offset + length passes 2**63 - 1 */
    tfr_chain_fault not_at_zero; /* the first entry, when its offset is not `first_offset` */
    tfr_chain_fault gap;         /* the first entry not starting where the one before ends */
    int64_t end;                 /* where the last entry ends (0 for none) */
    int64_t first_offset;        /* where the first entry must start (0 for a whole index) */
} tfr_index_chain;

/* Parse buf[0..size) into starts[i] (each entry's offset) for at most `cap` entries and follow
 * the chain of entries, the first due at `first_offset` (0 for a whole index), into `chain`. Returns the number of entries; on a malformed line stops
 * there with err->code != 0 (the entries before it are written). Passing cap >=
 * tfr_index_max_pairs() never runs out. */
size_t tfr_parse_index(const uint8_t *buf, size_t size, int64_t *starts, size_t cap, tfr_index_error *err,
                       tfr_index_chain *chain, int64_t first_offset);

#endif
