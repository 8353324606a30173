/* libFuzzer harness over the plain-C core (no Python). Built with AddressSanitizer and UBSan by
 * run_fuzz.sh. Besides memory safety it checks, aborting on any difference:
 *  - frame scan: resumed in pieces of a data-chosen capacity (1..16, as the binding grows its
 *    arrays), at every verify level and with a record limit, against a naive reference scan;
 *  - candidate search (find_length_crc, and find_length_crcs in pieces of a data-chosen
 *    capacity: the resync's C part) from several starts against a naive byte-by-byte
 *    reference on the table CRC;
 *  - hardware and table CRC32C agree;
 *  - Example / SequenceExample decode; encoded decoder columns decode again;
 *  - the encoder on hostile columns built from the input (raw or plausible row_splits, value
 *    offsets and status bytes): it refuses them (TFR_ENC_BAD_INPUT) or its output parses, as
 *    framed records that scan whole and as payloads that decode;
 *  - `.tfindex` text parsing: never writes past its capacity; a parse with a data-chosen
 *    small capacity is a prefix of the full one (which never runs out of room);
 *  - inspect's statistics walk over the input and its two parts, and the range of a packed
 *    varint run against the run decoded value by value. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tfr_crc32c.h"
#include "tfr_encode.h"
#include "tfr_example.h"
#include "tfr_framing.h"
#include "tfr_index.h"
#include "tfr_stats.h"
#include "tfr_wire.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const char *NAMES[] = {"a", "b", "tokens", "ints", "floats", "dup", "bytes_utf8", "", "ключ", "length", "words", "weights"};

static void make_desc(tfr_desc *d, size_t n, uint8_t salt) {
    for (size_t j = 0; j < n; j++) {
        d[j].name = (const uint8_t *)NAMES[j];
        d[j].name_len = strlen(NAMES[j]);
        d[j].kind = 1 + (int)((j + salt) % 3);
    }
}

static void free_cols(tfr_column *c, size_t n) {
    for (size_t j = 0; j < n; j++) tfr_column_free(&c[j]);
}

/* Encode decoded Example columns and decode the result again: it must parse. */
static void roundtrip(const tfr_desc *d, size_t nf, tfr_column *cols, size_t nrec) {
    tfr_enc_col ec[N(NAMES)];
    for (size_t j = 0; j < nf; j++) {
        tfr_column *c = &cols[j];
        ec[j].name = d[j].name;
        ec[j].name_len = d[j].name_len;
        ec[j].kind = d[j].kind;
        ec[j].values = c->values.data;
        ec[j].values_len = d[j].kind == TFR_KIND_BYTES ? c->values.len : c->values.len / (d[j].kind == TFR_KIND_FLOAT ? 4 : 8);
        ec[j].value_offsets = (const int64_t *)(void *)c->value_offsets.data;
        ec[j].nvalues = c->value_offsets.len ? c->value_offsets.len / 8 - 1 : 0;
        ec[j].row_splits = (const int64_t *)(void *)c->row_splits.data;
        ec[j].status = c->status.data;
    }
    tfr_buf out = {0}, offs = {0};
    int bad;
    if (tfr_encode_examples(ec, nf, nrec, 0, &out, &offs, &bad) != TFR_ENC_OK) abort();
    const int64_t *o = (const int64_t *)(void *)offs.data;
    const uint8_t *ptrs[4];
    int64_t lens[4];
    for (size_t i = 0; i < nrec; i++) {
        ptrs[i] = out.data + o[i];
        lens[i] = o[i + 1] - o[i];
    }
    tfr_column again[N(NAMES)];
    memset(again, 0, sizeof again);
    tfr_error err;
    if (tfr_decode_examples(ptrs, lens, nrec, d, nf, again, &err) != TFR_OK) abort();
    free_cols(again, nf);
    tfr_buf_free(&out);
    tfr_buf_free(&offs);
}

#ifdef FUZZ_STATS /* -DFUZZ_STATS: print how often each encoder outcome was reached, at exit */
#include <stdio.h>
static unsigned long long enc_outcomes[3];
__attribute__((destructor)) static void print_stats(void) {
    fprintf(stderr, "encoder: %llu ok, %llu refused, %llu decoded again\n", enc_outcomes[0], enc_outcomes[1], enc_outcomes[2]);
}
#define COUNT(k) (enc_outcomes[k]++)
#else
#define COUNT(k) ((void)0)
#endif

/* -- naive references ---------------------------------------------------------------------- */
static uint64_t ld64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint32_t ld32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint32_t ref_masked(const uint8_t *p, size_t n) { return tfr_mask_crc(tfr_crc32c_sw(0, p, n)); }

static int64_t ref_find_length_crc(const uint8_t *buf, size_t size, size_t start) {
    for (size_t i = start; i + TFR_HEADER_SIZE <= size; i++)
        if (ref_masked(buf + i, 8) == ld32(buf + i + 8)) return (int64_t)i;
    return -1;
}

/* Every frame from the start, one at a time, as the format says. */
static size_t ref_scan(const uint8_t *buf, size_t size, int verify, int64_t max, int64_t *offs, int64_t *lens,
                       size_t *consumed, int *status) {
    size_t pos = 0, n = 0;
    *status = TFR_SCAN_OK;
    while (pos < size && (max < 0 || (int64_t)n < max)) {
        if (size - pos < TFR_HEADER_SIZE) { *status = TFR_SCAN_INCOMPLETE; break; }
        uint64_t length = ld64(buf + pos);
        if (verify != TFR_VERIFY_NONE && ref_masked(buf + pos, 8) != ld32(buf + pos + 8)) { *status = TFR_SCAN_BAD_LENGTH_CRC; break; }
        if (length > (uint64_t)(size - pos) || size - pos - TFR_HEADER_SIZE < TFR_FOOTER_SIZE ||
            length > size - pos - TFR_HEADER_SIZE - TFR_FOOTER_SIZE) { *status = TFR_SCAN_INCOMPLETE; break; }
        if (verify == TFR_VERIFY_ALL && ref_masked(buf + pos + 12, (size_t)length) != ld32(buf + pos + 12 + length)) {
            *status = TFR_SCAN_BAD_DATA_CRC;
            break;
        }
        offs[n] = (int64_t)(pos + TFR_HEADER_SIZE);
        lens[n] = (int64_t)length;
        n++;
        pos += TFR_FRAME_OVERHEAD + (size_t)length;
    }
    *consumed = pos;
    return n;
}

/* The scan as the binding drives it: pieces of at most `cap` frames, resumed where they stop. */
static size_t pieced_scan(const uint8_t *buf, size_t size, int verify, int64_t max, size_t cap, int64_t *offs,
                          int64_t *lens, size_t *consumed, int *status) {
    size_t pos = 0, total = 0;
    *status = TFR_SCAN_OK;
    for (;;) {
        size_t used;
        int64_t left = max < 0 ? -1 : max - (int64_t)total;
        size_t got = tfr_scan_frames(buf + pos, size - pos, verify, left, offs + total, lens + total, cap, &used, status);
        if (got > cap) abort();
        for (size_t k = 0; k < got; k++) offs[total + k] += (int64_t)pos;
        total += got;
        pos += used;
        if (got < cap || *status != TFR_SCAN_OK || pos >= size) break;
        if (max >= 0 && (int64_t)total >= max) break;
    }
    *consumed = pos;
    return total;
}

static void check_framing(const uint8_t *data, size_t size, uint8_t mode) {
    size_t most = size / TFR_FRAME_OVERHEAD + 1;
    int64_t *o1 = malloc(most * 8), *l1 = malloc(most * 8), *o2 = malloc(most * 8), *l2 = malloc(most * 8);
    if (!o1 || !l1 || !o2 || !l2) abort();
    size_t cap = 1 + (size_t)(mode * 7u) % 16;
    for (int verify = 0; verify < 3; verify++) {
        int64_t max = (mode & 0x40) ? (int64_t)(mode % 5) : -1;
        size_t c1, c2;
        int s1, s2;
        size_t n1 = ref_scan(data, size, verify, max, o1, l1, &c1, &s1);
        size_t n2 = pieced_scan(data, size, verify, max, cap, o2, l2, &c2, &s2);
        if (n1 != n2 || c1 != c2 || s1 != s2) abort();
        if (memcmp(o1, o2, n1 * 8) || memcmp(l1, l2, n1 * 8)) abort();
    }
    free(o1);
    free(l1);
    free(o2);
    free(l2);
    size_t starts[4] = {0, (size_t)mode % (size + 1), size / 2, size + (mode & 3)};
    int64_t hits[16];
    for (int k = 0; k < 4; k++) {
        if (tfr_find_length_crc(data, size, starts[k]) != ref_find_length_crc(data, size, starts[k])) abort();
        /* all candidates, in pieces of a data-chosen capacity, against the reference walk */
        size_t pos = starts[k], piece = 1 + (size_t)(mode >> 3) % 16, next;
        int64_t want = ref_find_length_crc(data, size, pos);
        for (;;) {
            size_t got = tfr_find_length_crcs(data, size, pos, hits, piece, &next);
            for (size_t h = 0; h < got; h++) {
                if (hits[h] != want) abort();
                want = ref_find_length_crc(data, size, (size_t)hits[h] + 1);
            }
            pos = next;
            if (got < piece) break;
        }
        if (want != -1) abort();
    }
}

/* -- the encoder on hostile columns --------------------------------------------------------- */
typedef struct {
    const uint8_t *p;
    size_t left;
} cursor;

static uint8_t take8(cursor *c) {
    if (!c->left) return 0;
    c->left--;
    return *c->p++;
}

static int64_t take64(cursor *c) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | take8(c);
    return (int64_t)v;
}

/* n+1 (or count+1) splits: raw 64-bit values (hostile) or running sums of small steps. */
static void make_splits(cursor *c, int64_t *out, size_t count, int raw) {
    int64_t at = 0;
    for (size_t i = 0; i <= count; i++) {
        if (raw) {
            out[i] = take64(c);
        } else {
            out[i] = at;
            at += take8(c) % 4;
        }
    }
}

static void fuzz_encoder(const uint8_t *data, size_t size) {
    cursor c = {data, size};
    size_t n = take8(&c) % 6, ncols = 1 + take8(&c) % 4;
    tfr_enc_col cols[4];
    tfr_desc d[4];
    int64_t splits[4][7], offsets[4][65];
    uint8_t status[4][6], bytes[4][256];
    int64_t ints[4][64];
    float floats[4][64];
    for (size_t j = 0; j < ncols; j++) {
        uint8_t flags = take8(&c);
        int kind = 1 + flags % 3;
        size_t nvalues = take8(&c) % 64;
        make_splits(&c, splits[j], n, flags & 0x10);
        tfr_enc_col *col = &cols[j];
        memset(col, 0, sizeof *col);
        col->name = (const uint8_t *)NAMES[j];
        col->name_len = strlen(NAMES[j]);
        col->kind = kind;
        col->row_splits = splits[j];
        if (flags & 0x20) {
            for (size_t i = 0; i < n; i++) status[j][i] = take8(&c); /* any byte: 0, 1, 2 or other */
            col->status = status[j];
        }
        if (kind == TFR_KIND_BYTES) {
            size_t blen = take8(&c);
            for (size_t k = 0; k < blen; k++) bytes[j][k] = take8(&c);
            make_splits(&c, offsets[j], nvalues, flags & 0x40);
            col->values = bytes[j];
            col->values_len = blen;
            col->value_offsets = offsets[j];
            col->nvalues = nvalues;
        } else if (kind == TFR_KIND_INT64) {
            for (size_t k = 0; k < nvalues; k++) ints[j][k] = take64(&c);
            col->values = ints[j];
            col->values_len = nvalues;
        } else {
            for (size_t k = 0; k < nvalues; k++) {
                uint32_t bits = (uint32_t)take64(&c);
                memcpy(&floats[j][k], &bits, 4);
            }
            col->values = floats[j];
            col->values_len = nvalues;
        }
        d[j].name = col->name;
        d[j].name_len = col->name_len;
        d[j].kind = kind;
    }
    for (int framed = 0; framed < 2; framed++) {
        tfr_buf out = {0}, offs = {0};
        int bad;
        int rc = tfr_encode_examples(cols, ncols, n, framed, &out, &offs, &bad);
        COUNT(rc == TFR_ENC_OK ? 0 : 1);
        if (rc == TFR_ENC_BAD_INPUT) {
            if (bad < 0 || (size_t)bad >= ncols) abort();
        } else if (rc != TFR_ENC_OK) {
            abort();
        } else if (framed) { /* whole frames, both CRCs valid, n of them */
            int64_t *fo = malloc((n + 1) * 8), *fl = malloc((n + 1) * 8);
            size_t used;
            int st;
            if (!fo || !fl) abort();
            if (tfr_scan_frames(out.data, out.len, TFR_VERIFY_ALL, -1, fo, fl, n + 1, &used, &st) != n ||
                used != out.len || st != TFR_SCAN_OK)
                abort();
            free(fo);
            free(fl);
        } else { /* n payloads back to back that decode */
            const int64_t *o = (const int64_t *)(void *)offs.data;
            const uint8_t *ptrs[6];
            int64_t lens[6];
            int64_t sizes[6];
            if (offs.len != (n + 1) * 8 || o[0] != 0 || (size_t)o[n] != out.len) abort();
            if (tfr_example_lengths(cols, ncols, n, sizes, &bad) != TFR_ENC_OK) abort();
            for (size_t i = 0; i < n; i++) {
                if (o[i + 1] < o[i] || sizes[i] != o[i + 1] - o[i]) abort(); /* the sizes pass agrees */
                ptrs[i] = out.data + o[i];
                lens[i] = o[i + 1] - o[i];
            }
            tfr_column again[4];
            tfr_error err;
            memset(again, 0, sizeof again);
            if (tfr_decode_examples(ptrs, lens, n, d, ncols, again, &err) != TFR_OK) abort();
            COUNT(2);
            free_cols(again, ncols);
        }
        tfr_buf_free(&out);
        tfr_buf_free(&offs);
    }
}

static void fuzz_index_text(const uint8_t *data, size_t size, uint8_t mode) {
    size_t cap = tfr_index_max_pairs(data, size);
    int64_t *all = (int64_t *)malloc(cap * 8), few[8];
    if (!all) abort();
    tfr_index_error err, err2;
    tfr_index_chain chain, chain2;
    size_t n = tfr_parse_index(data, size, all, cap, &err, &chain, 0);
    if (n > cap || err.code == TFR_INDEX_FULL || (err.code && (err.line < 1 || err.line_start > size))) abort();
    size_t small = (size_t)(mode % 5);
    size_t m = tfr_parse_index(data, size, few, small, &err2, &chain2, (int64_t)(mode & 3));
    if (m > small || m > n || memcmp(few, all, m * 8) != 0) abort();
    if (m < n && err2.code != TFR_INDEX_FULL) abort();
    if (m == n && err2.code != err.code && err2.code != TFR_INDEX_FULL) abort();
    for (size_t i = 0; i < n; i++) if (all[i] < 0) abort();
    if (chain.gap.found && (chain.gap.entry == 0 || chain.gap.entry >= n)) abort();
    if (chain.overflow.found && chain.overflow.entry >= n) abort();
    free(all);
}

static void fuzz_stats(const uint8_t *data, size_t size, size_t cut) {
    int64_t offs[3] = {0, 0, (int64_t)cut}, lens[3] = {(int64_t)size, (int64_t)cut, (int64_t)(size - cut)};
    tfr_stats st;
    memset(&st, 0, sizeof st);
    size_t taken = 0;
    int rc = tfr_stats_examples(&st, data, size, offs, lens, 0, 3, &taken);
    if ((rc != TFR_OK && rc != TFR_ERR_NOMEM) || taken > 3) abort();
    tfr_stats_free(&st);
    int64_t lo = 0, hi = 0;
    ptrdiff_t count = tfr_varint_run_range(data, data + size, &lo, &hi);
    if (count == TFR_RUN_SLOW) return;
    uint64_t *values = (uint64_t *)malloc((size + 1) * 8);
    if (!values) abort();
    if (tfr_varint_run(data, data + size, data + size, values) != count) abort();
    for (ptrdiff_t i = 0; i < count; i++)
        if ((int64_t)values[i] < lo || (int64_t)values[i] > hi) abort();
    int seen_lo = 0, seen_hi = 0;
    for (ptrdiff_t i = 0; i < count; i++) {
        seen_lo |= (int64_t)values[i] == lo;
        seen_hi |= (int64_t)values[i] == hi;
    }
    if (count && (!seen_lo || !seen_hi)) abort();
    free(values);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready = 0;
    if (!ready) {
        tfr_wire_init();
        ready = 1;
    }
    if (size < 1) return 0;
    uint8_t mode = data[0];
    data++;
    size--;

    /* framing: scan with and without CRCs; CRC paths agree */
    int64_t offs[8], lens[8];
    size_t consumed;
    int status;
    tfr_scan_frames(data, size, mode & 1, -1, offs, lens, 8, &consumed, &status);
    if (tfr_crc32c(0, data, size) != tfr_crc32c_sw(0, data, size)) abort();
    check_framing(data, size, mode);
    fuzz_encoder(data, size);
    fuzz_index_text(data, size, mode);

    /* records: the whole input, and the input split in two at a data-chosen point */
    size_t cut = size ? (size_t)(mode * 131u) % (size + 1) : 0;
    const uint8_t *ptrs[3] = {data, data, data + cut};
    int64_t rl[3] = {(int64_t)size, (int64_t)cut, (int64_t)(size - cut)};
    size_t nf = 1 + (mode >> 4) % N(NAMES);
    tfr_desc d[N(NAMES)];
    make_desc(d, nf, mode);
    tfr_column cols[N(NAMES)], scols[N(NAMES)];
    tfr_error err;

    fuzz_stats(data, size, cut);

    memset(cols, 0, sizeof cols);
    if (tfr_decode_examples(ptrs, rl, 3, d, nf, cols, &err) == TFR_OK) roundtrip(d, nf, cols, 3);
    free_cols(cols, nf);

    memset(cols, 0, sizeof cols);
    memset(scols, 0, sizeof scols);
    tfr_decode_sequence_examples(ptrs, rl, 3, d, nf / 2, cols, d + nf / 2, nf - nf / 2, scols, &err);
    free_cols(cols, nf / 2);
    free_cols(scols, nf - nf / 2);
    return 0;
}
