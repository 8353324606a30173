/* TFRecord framing over a byte buffer: scan frames (checking both CRCs) and write frames.
 * Plain C, no Python. Frame: uint64 length | masked crc32c(length) | payload | masked crc32c(payload). */
#ifndef TFR_FRAMING_H
#define TFR_FRAMING_H
#include <stddef.h>
#include <stdint.h>

#define TFR_HEADER_SIZE 12
#define TFR_FOOTER_SIZE 4
#define TFR_FRAME_OVERHEAD 16

/* Same codes as tfrecord_beam/_engine/_common.py STATUS_* */
enum { TFR_SCAN_OK = 0, TFR_SCAN_INCOMPLETE = 1, TFR_SCAN_BAD_LENGTH_CRC = 2, TFR_SCAN_BAD_DATA_CRC = 3 };

/* `verify` levels (same as _engine/_common.py VERIFY_*): none, both CRCs, or length CRCs only. */
enum { TFR_VERIFY_NONE = 0, TFR_VERIFY_ALL = 1, TFR_VERIFY_LENGTHS = 2 };

/* Scan complete frames at the start of buf[0..size). Writes up to `cap` payload offsets and
 * lengths; stops at `max_records` (<0: no limit), at the end of buf, or at the first bad or
 * incomplete frame. Returns the number of frames found; *consumed and *status say where and why
 * it stopped. When it stops because `cap` is full, status is OK and the caller grows and resumes
 * from *consumed. */
size_t tfr_scan_frames(const uint8_t *buf, size_t size, int verify, int64_t max_records,
                       int64_t *offsets, int64_t *lengths, size_t cap, size_t *consumed, int *status);

/* The first position i >= start where buf[i..i+8) carries its masked CRC32C in buf[i+8..i+12)
 * (a candidate record header), or -1 when none does before the end of buf. */
int64_t tfr_find_length_crc(const uint8_t *buf, size_t size, size_t start);

/* Every such position in [start, size - 12]: writes up to `cap` of them to `out` and returns
 * how many; *next is where to resume (size - 11 or more once the end is reached). */
size_t tfr_find_length_crcs(const uint8_t *buf, size_t size, size_t start, int64_t *out, size_t cap, size_t *next);

/* Write the 12-byte header of a `length`-byte payload into out. */
void tfr_write_header(uint8_t *out, uint64_t length);
/* Write the 4-byte footer (masked CRC of the payload) into out. */
void tfr_write_footer(uint8_t *out, const uint8_t *payload, size_t length);

#endif

/* Header walk (index building without reading payloads), plain C over a buffer.
 * `buf` holds the file's bytes [base, base + size) of a file of `file_size` bytes. From the
 * header at *pos, record each header lying wholly in buf whose length CRC is valid and whose
 * frame fits in the file: header offset and payload length, appended at index *n of
 * offsets/lengths/footers (which hold `cap` entries; *n counts the records walked so far).
 * *pos moves to the next header (which may lie past the buffer: the payloads are not looked
 * at). A record's footer (its payload CRC, masked, as stored) is the 4 bytes before the next
 * header: *footer_due says footers[*n - 1] still waits for it, and it is filled whenever those
 * 4 bytes are in buf (a buffer read from 4 bytes before *pos brings it at no extra read).
 * Stops with TFR_WALK_MORE (the header at *pos is not in buf, or cap is full),
 * TFR_WALK_BAD_LENGTH_CRC or TFR_WALK_PAST_END (the frame at *pos ends after the file). */
enum { TFR_WALK_MORE = 0, TFR_WALK_BAD_LENGTH_CRC = 2, TFR_WALK_PAST_END = 3 };
void tfr_walk_headers(const uint8_t *buf, size_t size, uint64_t base, uint64_t file_size, uint64_t *pos,
                      int64_t *offsets, int64_t *lengths, uint32_t *footers, size_t *n, size_t cap, int *footer_due,
                      int *status);
