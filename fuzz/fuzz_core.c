/* libFuzzer harness over the plain-C core (no Python): frame scan, Example and
 * SequenceExample decode, and encode of what was decoded. Built with AddressSanitizer and
 * UBSan by run_fuzz.sh; it checks nothing but memory safety, plus two invariants that abort:
 * encoded columns must decode again, and the hardware and table CRC32C must agree. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tfr_crc32c.h"
#include "tfr_encode.h"
#include "tfr_example.h"
#include "tfr_framing.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
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

    /* records: the whole input, and the input split in two at a data-chosen point */
    size_t cut = size ? (size_t)(mode * 131u) % (size + 1) : 0;
    const uint8_t *ptrs[3] = {data, data, data + cut};
    int64_t rl[3] = {(int64_t)size, (int64_t)cut, (int64_t)(size - cut)};
    size_t nf = 1 + (mode >> 4) % N(NAMES);
    tfr_desc d[N(NAMES)];
    make_desc(d, nf, mode);
    tfr_column cols[N(NAMES)], scols[N(NAMES)];
    tfr_error err;

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
