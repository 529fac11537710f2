/* CRC-32 (IEEE 802.3, the polynomial of zlib and of .gnu_debuglink): by folding with carry-less
 * multiplication where the CPU has it, else slicing-by-8. */
#ifndef PTMD_CRC32_H
#define PTMD_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Continues a CRC: start with crc = 0. */
uint32_t ptmd_crc32(uint32_t crc, const void *data, size_t len);

#endif
