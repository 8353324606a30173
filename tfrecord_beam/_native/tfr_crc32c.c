/* CRC32C: SSE4.2 hardware path chosen at run time, slicing-by-8 table fallback. */
#include "tfr_crc32c.h"

#include <string.h>

#define POLY 0x82F63B78u /* reflected Castagnoli polynomial */

static uint32_t table[8][256];
void tfr_crc32c_init(void);
static int table_ready = 0;

static void build_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (POLY & (0u - (c & 1u)));
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xFF];
    table_ready = 1;
}

uint32_t tfr_crc32c_sw(uint32_t crc, const uint8_t *p, size_t len) {
    if (!table_ready) tfr_crc32c_init(); /* normally done once at import, before any thread */
    crc = ~crc;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        /* little-endian assembly regardless of host order */
        uint32_t lo = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        (void)w;
        lo ^= crc;
        crc = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^
              table[4][lo >> 24] ^ table[3][hi & 0xFF] ^ table[2][(hi >> 8) & 0xFF] ^
              table[1][(hi >> 16) & 0xFF] ^ table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define TFR_HAVE_HW 1

/* shiftN[b][v]: the CRC state v << 8b advanced over N zero bytes (linear, so per byte). */
static uint32_t shift1024[4][256], shift2048[4][256];

__attribute__((target("sse4.2"))) static void build_shift_tables(void) {
    for (int t = 0; t < 2; t++) {
        size_t n = t ? 2048 : 1024;
        uint32_t (*tab)[256] = t ? shift2048 : shift1024;
        for (int byte = 0; byte < 4; byte++)
            for (uint32_t v = 0; v < 256; v++) {
                uint64_t x = (uint64_t)(v << (8 * byte));
                for (size_t k = 0; k < n; k += 8) x = _mm_crc32_u64(x, 0);
                tab[byte][v] = (uint32_t)x;
            }
    }
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t len) {
    uint64_t c = ~crc;
    /* three independent streams hide the instruction's 3-cycle latency on long buffers */
    while (len >= 3 * 1024) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *p1 = p + 1024, *p2 = p + 2048;
        for (int i = 0; i < 1024; i += 8) {
            uint64_t a, b, d;
            memcpy(&a, p + i, 8);
            memcpy(&b, p1 + i, 8);
            memcpy(&d, p2 + i, 8);
            c = _mm_crc32_u64(c, a);
            c1 = _mm_crc32_u64(c1, b);
            c2 = _mm_crc32_u64(c2, d);
        }
        /* combine: shift c over 2048 bytes and c1 over 1024 bytes of zeros (tables from init) */
        {
            uint32_t a = (uint32_t)c, b = (uint32_t)c1;
            uint32_t sa = shift2048[0][a & 0xFF] ^ shift2048[1][(a >> 8) & 0xFF] ^ shift2048[2][(a >> 16) & 0xFF] ^ shift2048[3][a >> 24];
            uint32_t sb = shift1024[0][b & 0xFF] ^ shift1024[1][(b >> 8) & 0xFF] ^ shift1024[2][(b >> 16) & 0xFF] ^ shift1024[3][b >> 24];
            c = sa ^ sb ^ (uint32_t)c2;
        }
        p += 3 * 1024;
        len -= 3 * 1024;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
#endif

static int hw_state = -1; /* -1 not initialised, 0 table path, 1 SSE4.2 */

void tfr_crc32c_init(void) {
    if (hw_state >= 0) return;
    build_table();
#ifdef TFR_HAVE_HW
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        build_shift_tables();
        hw_state = 1;
        return;
    }
#endif
    hw_state = 0;
}

int tfr_crc32c_hw(void) {
    tfr_crc32c_init();
    return hw_state;
}

uint32_t tfr_crc32c(uint32_t crc, const uint8_t *data, size_t len) {
#ifdef TFR_HAVE_HW
    if (tfr_crc32c_hw()) return crc_hw(crc, data, len);
#endif
    return tfr_crc32c_sw(crc, data, len);
}
