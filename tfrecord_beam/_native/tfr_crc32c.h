/* CRC32C (Castagnoli) and TFRecord's masked variant; plain C, no Python. */
#ifndef TFR_CRC32C_H
#define TFR_CRC32C_H
#include <stddef.h>
#include <stdint.h>

/* Extend `crc` (0 to start) over data[0..len). Uses the SSE4.2 crc32 instruction when the
 * CPU has it (checked once at run time), a slicing-by-8 table otherwise. */
uint32_t tfr_crc32c(uint32_t crc, const uint8_t *data, size_t len);

/* TFRecord's masked CRC32C: rotate right by 15 and add a constant. */
static inline uint32_t tfr_mask_crc(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

static inline uint32_t tfr_masked_crc32c(const uint8_t *data, size_t len) {
    return tfr_mask_crc(tfr_crc32c(0, data, len));
}

/* Detect the CPU and build the tables; call once before threads use the CRC (the binding does
 * it at import). Later calls do nothing. */
void tfr_crc32c_init(void);

/* 1 when the hardware path is in use (for tests and the benchmark). */
int tfr_crc32c_hw(void);
/* Table path only, whatever the CPU: lets tests compare both paths. */
uint32_t tfr_crc32c_sw(uint32_t crc, const uint8_t *data, size_t len);

#endif
