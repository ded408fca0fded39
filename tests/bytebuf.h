/* A growable byte buffer for tests that build files (GGUF, safetensors) in memory: put() appends
 * bytes, PUT appends one value of a type, put_str a GGUF string (u64 length + bytes), put_key a
 * GGUF metadata key and its value type. Aborts when memory runs out (tests only). */
#ifndef PULSE_TEST_BYTEBUF_H
#define PULSE_TEST_BYTEBUF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static inline void put(struct buf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}

/* Appends one value of type T (an expression, usable in comma lists). */
#define PUT(b, T, v) put((b), &(T){(v)}, sizeof(T))

static inline void put_str(struct buf *b, const char *s)
{
    PUT(b, uint64_t, strlen(s));
    put(b, s, strlen(s));
}

static inline void put_key(struct buf *b, const char *key, uint32_t type)
{
    put_str(b, key);
    PUT(b, uint32_t, type);
}

#endif
