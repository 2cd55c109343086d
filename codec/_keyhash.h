/*
 * The key hashes of Kafka's clients, shared by trafka's C extensions (the codec's
 * _speedups and the SDK's _hot_append): one copy, included by each. The Python
 * references are trafka.sdk.partitioners (murmur2, crc32_partition,
 * fnv1a_partition); the property tests compare them.
 *
 * - murmur2_hash: Java's Utils.murmur2 (seed 0x9747b28c), unsigned.
 * - crc32_ieee: zlib's CRC-32 (IEEE, reflected), librdkafka's "consistent".
 * - key_partition: hash(key) % partitions as trafka.sdk.partitioners.KEY_HASHES.
 */
#ifndef TRAFKA_KEYHASH_H
#define TRAFKA_KEYHASH_H

#include <Python.h>
#include <stdint.h>

static uint32_t
murmur2_hash(const unsigned char *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t n4 = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < n4; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8) |
                     ((uint32_t)data[i + 2] << 16) | ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[n4 + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[n4 + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)data[n4];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

#define HASH_MURMUR2 0
#define HASH_CRC32 1
#define HASH_FNV1A 2

static uint32_t crc32_table[256];
static int crc32_ready;

/* zlib's CRC-32 (IEEE, reflected), as librdkafka's "consistent" partitioner uses it. */
static uint32_t
crc32_ieee(const unsigned char *data, Py_ssize_t n)
{
    if (!crc32_ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) {
                c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            }
            crc32_table[i] = c;
        }
        crc32_ready = 1; /* written under the GIL, and the same values by any writer */
    }
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < n; i++) {
        c = crc32_table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
    }
    return c ^ 0xFFFFFFFFu;
}

/* The partition of a key, as trafka.sdk.partitioners.KEY_HASHES computes it. */
static int64_t
key_partition(int hash, const unsigned char *key, int32_t n, int64_t partitions)
{
    if (hash == HASH_MURMUR2) {
        return (int64_t)(murmur2_hash(key, n) & 0x7FFFFFFFu) % partitions;
    }
    if (hash == HASH_CRC32) {
        return (int64_t)crc32_ieee(key, n) % partitions;
    }
    uint32_t h = 0x811C9DC5u; /* FNV-1a, 32 bits; sarama takes abs() of it as signed */
    for (int32_t i = 0; i < n; i++) {
        h = (h ^ key[i]) * 0x01000193u;
    }
    int64_t signed_h = (int64_t)(int32_t)h;
    return (signed_h < 0 ? -signed_h : signed_h) % partitions;
}

#endif /* TRAFKA_KEYHASH_H */
