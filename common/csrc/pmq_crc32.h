/* pmq_crc32.h: zlib's CRC-32, folded with PCLMULQDQ where the CPU has it.
 *
 * Shared by the compiled accelerators (broker/store/_speedups.c, client/_codec.c,
 * spark/_arrowcodec.c): a record's BODYCRC is zlib's crc32 of its body
 * (common/message.py body_crc, masked to 31 bits by the caller), computed by the
 * producer's encoder and the Spark sink, checked by the broker's put, the replica's
 * frame check and the Spark source. zlib's table CRC runs at about 0.27 us a KiB here;
 * the folded loop at about 0.07. Each includer gets its own static copy.
 *
 * Needs <stdint.h>, <stddef.h> and <zlib.h> included before it.
 */
#ifndef PMQ_CRC32_H
#define PMQ_CRC32_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_CLMUL_CRC32 1

/* CRC-32 (zlib's: reflected polynomial 0x04C11DB7) of *len* bytes, a multiple of 16
 * and at least 64, from the raw (not inverted) state *crc*: four lanes folded 64
 * bytes at a time, then one, then a Barrett reduction. The constants are the
 * reflected x^k mod P of Intel's "Fast CRC Computation for Generic Polynomials
 * Using PCLMULQDQ" (as in Linux's crc32-pclmul and Chromium's zlib). */
__attribute__((target("pclmul,sse4.1"))) static uint32_t
crc32_clmul(const unsigned char *buf, size_t len, uint32_t crc)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1, x2, x3, x4, x5, x6, x7, x8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    buf += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        x6 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        x7 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        x8 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5),
                           _mm_loadu_si128((const __m128i *)(buf + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6),
                           _mm_loadu_si128((const __m128i *)(buf + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7),
                           _mm_loadu_si128((const __m128i *)(buf + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8),
                           _mm_loadu_si128((const __m128i *)(buf + 0x30)));
        buf += 64;
        len -= 64;
    }
    /* four lanes into one */
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x2), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x3), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x2), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 bits to 64, to 32, then Barrett */
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5k0, 0x00), x2);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly, 0x10);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, mask32), poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

static int clmul_crc32_usable = -1;     /* -1: not asked yet */
#endif

/* zlib's crc32(crc, buf, len): the folded loop over the 16-byte blocks of a long
 * buffer when the CPU has PCLMULQDQ and SSE4.1, zlib for the rest. */
static uint32_t
crc32_fast(uint32_t crc, const unsigned char *buf, size_t len)
{
#ifdef HAVE_CLMUL_CRC32
    if (len >= 64) {
        if (clmul_crc32_usable < 0) {
            __builtin_cpu_init();
            clmul_crc32_usable = __builtin_cpu_supports("pclmul")
                                 && __builtin_cpu_supports("sse4.1");
        }
        if (clmul_crc32_usable) {
            size_t blocks = len & ~(size_t)15;
            crc = ~crc32_clmul(buf, blocks, ~crc);
            buf += blocks;
            len -= blocks;
        }
    }
#endif
    while (len > 0) {                   /* zlib takes uInt lengths */
        uInt n = len > 0x40000000u ? 0x40000000u : (uInt)len;
        crc = (uint32_t)crc32((uLong)crc, buf, n);
        buf += n;
        len -= n;
    }
    return crc;
}

#endif /* PMQ_CRC32_H */
