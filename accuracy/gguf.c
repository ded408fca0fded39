/* GGUF reader, parsing and metadata (see gguf.h; tensor types and dequantisation are in
 * gguf_quant.c). Parsing reads through one bounds-checked cursor; every count is compared with
 * the bytes left before anything is allocated for it, and all parse-time allocations come from
 * one arena freed by gguf_free. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "numeric.h"

#define NAMEBUF 80 /* a name quoted in a message: 64 bytes, '?' for unprintable, "..." if cut */

static const char *const VALUE_TYPES[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                          "int32",  "float32", "bool",   "string", "array",
                                          "uint64", "int64",   "float64"};
static const uint8_t VALUE_SIZE[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8}; /* 0: variable */

struct chunk {
    struct chunk *next;
    size_t used, cap;
    max_align_t data[];
};

struct kv {
    const char *key;
    struct gguf_value val;
};

struct name_index {
    uint32_t *slots; /* entry index + 1; 0 = empty */
    uint64_t mask;
};

struct gguf_file {
    char *label;
    const uint8_t *buf;
    size_t len;
    void *map; /* non-NULL when the handle mmapped buf */
    uint32_t version;
    uint64_t alignment, data_offset;
    uint64_t n_kv, n_tensors;
    struct kv *kvs;
    struct gguf_tensor *tensors;
    struct name_index kv_ix, tensor_ix;
    struct chunk *arena;
};

/* ---- errors and names ---- */

#define set_err(err, errlen, code, label, ...)                                                     \
    pulse_errorf((err), (errlen), (code), (label) ? (label) : "(gguf)", __VA_ARGS__)

/* Copies a name for a message: printable ASCII kept, other bytes '?', cut at 64 bytes. */
static const char *quote(const char *p, uint64_t len, char buf[NAMEBUF])
{
    size_t n = len > 64 ? 64 : (size_t)len, o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        buf[o++] = (c >= 32 && c < 127) ? (char)c : '?';
    }
    if (len > 64) memcpy(buf + o, "...", 3), o += 3;
    buf[o] = 0;
    return buf;
}

/* ---- the arena: every parse-time allocation, freed at once ---- */

static void *arena_alloc(struct gguf_file *g, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    struct chunk *c = g->arena;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = g->arena;
        c->used = 0;
        c->cap = cap;
        g->arena = c;
    }
    void *p = (unsigned char *)c->data + c->used;
    c->used += n;
    return p;
}

/* ---- name -> index hash tables (FNV-1a, linear probing) ---- */

typedef const char *(*name_at_fn)(const struct gguf_file *g, uint64_t i);
static const char *kv_name_at(const struct gguf_file *g, uint64_t i)
{
    return g->kvs[i].key;
}
static const char *tensor_name_at(const struct gguf_file *g, uint64_t i)
{
    return g->tensors[i].name;
}

static uint64_t hash_name(const char *s)
{
    return pulse_fnv1a_bytes(PULSE_FNV_INIT, s, strlen(s));
}

static int index_init(struct gguf_file *g, struct name_index *ix, uint64_t n)
{
    uint64_t cap = 8;
    while (cap < 2 * n)
        cap *= 2;
    ix->slots = arena_alloc(g, cap * sizeof *ix->slots);
    if (!ix->slots) return -1;
    memset(ix->slots, 0, cap * sizeof *ix->slots);
    ix->mask = cap - 1;
    return 0;
}

/* Index of `name`, or -1; with insert >= 0, adds that entry when the name is absent. */
static int64_t index_lookup(const struct gguf_file *g, const struct name_index *ix,
                            name_at_fn name_at, const char *name, int64_t insert)
{
    if (!ix->slots) return -1;
    for (uint64_t h = hash_name(name) & ix->mask;; h = (h + 1) & ix->mask) {
        uint32_t s = ix->slots[h];
        if (s == 0) {
            if (insert >= 0) ix->slots[h] = (uint32_t)insert + 1;
            return -1;
        }
        if (strcmp(name_at(g, s - 1), name) == 0) return (int64_t)s - 1;
    }
}

/* ---- the bounds-checked cursor ---- */

struct reader {
    struct gguf_file *g;
    size_t pos;
    char *err;
    size_t errlen;
};

#define FAIL(r, ...) set_err((r)->err, (r)->errlen, PULSE_ERR_INVALID, (r)->g->label, __VA_ARGS__)
#define NOMEM(r) set_err((r)->err, (r)->errlen, PULSE_ERR_NOMEM, (r)->g->label, "out of memory")

static size_t left(const struct reader *r)
{
    return r->g->len - r->pos;
}

static int rd(struct reader *r, void *dst, size_t n, const char *what)
{
    if (n > left(r))
        return FAIL(r, "truncated: %s needs %zu bytes at offset %zu, but the file ends at %zu",
                    what, n, r->pos, r->g->len);
    memcpy(dst, r->g->buf + r->pos, n); /* the file is little-endian, as is the host */
    r->pos += n;
    return PULSE_OK;
}

static int rd_str(struct reader *r, struct gguf_str *s, const char *what)
{
    uint64_t n = 0;
    int rc = rd(r, &n, 8, what);
    if (rc) return rc;
    if (n > left(r))
        return FAIL(r,
                    "%s: string length %" PRIu64 " runs past the end of the file (%zu bytes "
                    "left at offset %zu)",
                    what, n, left(r), r->pos);
    s->ptr = (const char *)r->g->buf + r->pos;
    s->len = n;
    r->pos += (size_t)n;
    return PULSE_OK;
}

/* Decodes a fixed-size scalar of `type` (not STRING or ARRAY) from little-endian bytes. */
static void decode_scalar(uint32_t type, const uint8_t *p, struct gguf_value *v)
{
    uint16_t u16;
    uint32_t u32;
    float f32;
    v->type = (enum gguf_type)type;
    switch (type) {
    case GGUF_TYPE_UINT8:
        v->u = p[0];
        break;
    case GGUF_TYPE_INT8:
        v->i = (int8_t)p[0];
        break;
    case GGUF_TYPE_BOOL:
        v->b = p[0] != 0;
        break;
    case GGUF_TYPE_UINT16:
        memcpy(&u16, p, 2), v->u = u16;
        break;
    case GGUF_TYPE_INT16:
        memcpy(&u16, p, 2), v->i = (int16_t)u16;
        break;
    case GGUF_TYPE_UINT32:
        memcpy(&u32, p, 4), v->u = u32;
        break;
    case GGUF_TYPE_INT32:
        memcpy(&u32, p, 4), v->i = (int32_t)u32;
        break;
    case GGUF_TYPE_FLOAT32:
        memcpy(&f32, p, 4), v->f = f32;
        break;
    case GGUF_TYPE_UINT64:
        memcpy(&v->u, p, 8);
        break;
    case GGUF_TYPE_INT64:
        memcpy(&v->i, p, 8);
        break;
    default:
        memcpy(&v->f, p, 8);
        break; /* FLOAT64 */
    }
}

static int rd_array(struct reader *r, struct gguf_array *a, int depth, const char *ctx);

/* Reads one value of `type`; ctx names the key for messages. */
static int rd_value(struct reader *r, uint32_t type, struct gguf_value *v, int depth,
                    const char *ctx)
{
    uint8_t b[8] = {0};
    int rc;
    v->type = (enum gguf_type)type;
    if (type > GGUF_TYPE_FLOAT64) return FAIL(r, "%s: invalid value type %" PRIu32, ctx, type);
    if (type == GGUF_TYPE_STRING) return rd_str(r, &v->s, ctx);
    if (type == GGUF_TYPE_ARRAY) return rd_array(r, &v->a, depth + 1, ctx);
    if ((rc = rd(r, b, VALUE_SIZE[type], ctx))) return rc;
    decode_scalar(type, b, v);
    return PULSE_OK;
}

/* An array body: element type, count, elements. Counts are bounded by the bytes left (a
 * string needs >= 8, a nested array >= 12), so allocations stay within a multiple of the file. */
static int rd_array(struct reader *r, struct gguf_array *a, int depth, const char *ctx)
{
    uint32_t et = 0;
    uint64_t n = 0;
    int rc;
    memset(a, 0, sizeof *a);
    if (depth > GGUF_MAX_DEPTH)
        return FAIL(r, "%s: arrays nested deeper than %d levels", ctx, GGUF_MAX_DEPTH);
    if ((rc = rd(r, &et, 4, ctx)) || (rc = rd(r, &n, 8, ctx))) return rc;
    if (et > GGUF_TYPE_FLOAT64) return FAIL(r, "%s: invalid array element type %" PRIu32, ctx, et);
    a->type = (enum gguf_type)et;
    a->n = n;
    uint64_t min = VALUE_SIZE[et] ? VALUE_SIZE[et] : (et == GGUF_TYPE_STRING ? 8 : 12);
    if (n > left(r) / min)
        return FAIL(r,
                    "%s: array of %" PRIu64 " %s elements runs past the end of the file (%zu "
                    "bytes left at offset %zu)",
                    ctx, n, VALUE_TYPES[et], left(r), r->pos);
    if (VALUE_SIZE[et]) {
        a->data = r->g->buf + r->pos;
        r->pos += (size_t)(n * min);
        return PULSE_OK;
    }
    if (n == 0) return PULSE_OK;
    if (et == GGUF_TYPE_STRING) {
        struct gguf_str *s = arena_alloc(r->g, (size_t)n * sizeof *s);
        if (!s) return NOMEM(r);
        a->strs = s;
        for (uint64_t i = 0; i < n; i++)
            if ((rc = rd_str(r, &s[i], ctx))) return rc;
        return PULSE_OK;
    }
    struct gguf_array *sub = arena_alloc(r->g, (size_t)n * sizeof *sub);
    if (!sub) return NOMEM(r);
    a->arrs = sub;
    for (uint64_t i = 0; i < n; i++)
        if ((rc = rd_array(r, &sub[i], depth + 1, ctx))) return rc;
    return PULSE_OK;
}

/* Copies a key or tensor name into the arena, NUL-terminated; rejects empty names and NULs. */
static int take_name(struct reader *r, const struct gguf_str *s, const char *what, uint64_t i,
                     const char **out)
{
    char q[NAMEBUF];
    if (s->len == 0) return FAIL(r, "%s %" PRIu64 " has an empty name", what, i);
    if (memchr(s->ptr, 0, (size_t)s->len))
        return FAIL(r, "%s %" PRIu64 " name '%s' contains a NUL byte", what, i,
                    quote(s->ptr, s->len, q));
    char *p = arena_alloc(r->g, (size_t)s->len + 1);
    if (!p) return NOMEM(r);
    memcpy(p, s->ptr, (size_t)s->len);
    p[s->len] = 0;
    *out = p;
    return PULSE_OK;
}

static int parse_header(struct reader *r)
{
    struct gguf_file *g = r->g;
    uint8_t magic[4] = {0};
    int rc;
    if (g->len < 4) return FAIL(r, "%zu bytes is too short for a GGUF header", g->len);
    if ((rc = rd(r, magic, 4, "magic"))) return rc;
    if (memcmp(magic, "GGUF", 4) != 0)
        return FAIL(r,
                    "not a GGUF file: bad magic %02x %02x %02x %02x (expected 47 47 55 46, "
                    "\"GGUF\")",
                    magic[0], magic[1], magic[2], magic[3]);
    if ((rc = rd(r, &g->version, 4, "version"))) return rc;
    if (g->version == 1) return FAIL(r, "GGUF version 1 is not supported (only versions 2 and 3)");
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffffu) == 0)
            return FAIL(r,
                        "GGUF version 0x%08" PRIx32 " looks byte-swapped: big-endian files "
                        "are not supported",
                        g->version);
        return FAIL(r, "unsupported GGUF version %" PRIu32 " (expected 2 or 3)", g->version);
    }
    if ((rc = rd(r, &g->n_tensors, 8, "tensor count")) || (rc = rd(r, &g->n_kv, 8, "kv count")))
        return rc;
    /* a metadata entry needs >= 14 bytes (key length 8, key 1, type 4, value 1), a tensor info
     * >= 25 (name length 8, name 1, n_dims 4, type 4, offset 8) */
    if (g->n_kv > left(r) / 14 || g->n_kv >= (1u << 31))
        return FAIL(r, "metadata count %" PRIu64 " is impossible: %zu bytes follow the header",
                    g->n_kv, left(r));
    if (g->n_tensors > left(r) / 25 || g->n_tensors >= (1u << 31))
        return FAIL(r, "tensor count %" PRIu64 " is impossible: %zu bytes follow the header",
                    g->n_tensors, left(r));
    return PULSE_OK;
}

static int parse_kvs(struct reader *r)
{
    struct gguf_file *g = r->g;
    char what[64], ctx[NAMEBUF + 32], q[NAMEBUF];
    int rc;
    g->kvs = arena_alloc(g, (size_t)(g->n_kv ? g->n_kv : 1) * sizeof *g->kvs);
    if (!g->kvs || index_init(g, &g->kv_ix, g->n_kv)) return NOMEM(r);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        struct gguf_str key = {0};
        uint32_t type = 0;
        snprintf(what, sizeof what, "key of metadata entry %" PRIu64, i);
        if ((rc = rd_str(r, &key, what)) ||
            (rc = take_name(r, &key, "metadata entry", i, &g->kvs[i].key)))
            return rc;
        int64_t dup = index_lookup(g, &g->kv_ix, kv_name_at, g->kvs[i].key, (int64_t)i);
        if (dup >= 0)
            return FAIL(r, "duplicate metadata key '%s' (entries %" PRId64 " and %" PRIu64 ")",
                        quote(key.ptr, key.len, q), dup, i);
        snprintf(ctx, sizeof ctx, "metadata key '%s'", quote(key.ptr, key.len, q));
        if ((rc = rd(r, &type, 4, ctx)) || (rc = rd_value(r, type, &g->kvs[i].val, 0, ctx)))
            return rc;
    }
    const struct gguf_value *al = gguf_find_kv(g, "general.alignment");
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (al) {
        if (al->type != GGUF_TYPE_UINT32)
            return FAIL(r, "metadata key 'general.alignment' has type %s, expected uint32",
                        gguf_type_name(al->type));
        if (al->u == 0 || (al->u & (al->u - 1)) != 0)
            return FAIL(r, "general.alignment %" PRIu64 " is not a power of two", al->u);
        g->alignment = al->u;
    }
    return PULSE_OK;
}

/* One tensor info: name, dims, type, offset, with the shape and size checks. */
static int parse_tensor_info(struct reader *r, uint64_t i)
{
    struct gguf_file *g = r->g;
    struct gguf_tensor *t = &g->tensors[i];
    struct gguf_str name = {0};
    char what[64], q[NAMEBUF];
    int rc;
    snprintf(what, sizeof what, "name of tensor %" PRIu64, i);
    if ((rc = rd_str(r, &name, what))) return rc;
    if (name.len > GGUF_MAX_NAME)
        return FAIL(r, "tensor %" PRIu64 " name '%s' is %" PRIu64 " bytes long (max %d)", i,
                    quote(name.ptr, name.len, q), name.len, GGUF_MAX_NAME);
    if ((rc = take_name(r, &name, "tensor", i, &t->name))) return rc;
    quote(name.ptr, name.len, q);
    int64_t dup = index_lookup(g, &g->tensor_ix, tensor_name_at, t->name, (int64_t)i);
    if (dup >= 0)
        return FAIL(r, "duplicate tensor name '%s' (tensors %" PRId64 " and %" PRIu64 ")", q, dup,
                    i);
    snprintf(what, sizeof what, "tensor info of '%.40s'", q);
    if ((rc = rd(r, &t->n_dims, 4, what))) return rc;
    if (t->n_dims > GGUF_MAX_DIMS)
        return FAIL(r, "tensor '%s' has %" PRIu32 " dimensions (max %d)", q, t->n_dims,
                    GGUF_MAX_DIMS);
    uint64_t n = 1;
    int overflow = 0, empty = 0;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d < t->n_dims && (rc = rd(r, &t->ne[d], 8, what))) return rc;
        if (t->ne[d] > (uint64_t)INT64_MAX)
            return FAIL(r, "tensor '%s' dimension %" PRIu32 " is %" PRIu64 " (negative as int64)",
                        q, d, t->ne[d]);
        if (t->ne[d] == 0)
            empty = 1;
        else if (n > (uint64_t)INT64_MAX / t->ne[d])
            overflow = 1;
        else
            n *= t->ne[d];
    }
    if (empty)
        n = 0;
    else if (overflow)
        return FAIL(r,
                    "tensor '%s' shape [%" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64
                    "] has 2^63 or more elements",
                    q, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    t->n_elems = n;
    t->n_rows = t->ne[0] ? n / t->ne[0] : 0;
    if ((rc = rd(r, &t->type, 4, what))) return rc;
    uint32_t blck = gguf_tensor_type_block_elems(t->type);
    if (!blck) return FAIL(r, "tensor '%s' has unknown ggml type %" PRIu32, q, t->type);
    if (t->ne[0] % blck)
        return FAIL(r,
                    "tensor '%s' of type %s: ne[0] = %" PRIu64 " is not a multiple of the "
                    "block size %" PRIu32,
                    q, gguf_tensor_type_name(t->type), t->ne[0], blck);
    uint64_t blocks = n / blck, bb = gguf_tensor_type_block_bytes(t->type);
    if (blocks > UINT64_MAX / bb) return FAIL(r, "tensor '%s' size in bytes overflows 64 bits", q);
    t->n_bytes = blocks * bb;
    return rd(r, &t->offset, 8, what);
}

static int cmp_by_offset(const void *a, const void *b)
{
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
    const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->n_bytes < y->n_bytes ? -1 : (x->n_bytes > y->n_bytes);
}

/* Places every tensor in the data section: aligned, inside the file, no two overlapping. */
static int place_tensors(struct reader *r)
{
    struct gguf_file *g = r->g;
    char q[NAMEBUF], q2[NAMEBUF];
    uint64_t start = r->pos;
    if (g->n_tensors == 0) {
        g->data_offset = start;
        return PULSE_OK;
    }
    start = (start + g->alignment - 1) / g->alignment * g->alignment;
    if (start > g->len)
        return FAIL(r,
                    "data section would start at byte %" PRIu64 ", past the end of the file "
                    "(%zu bytes)",
                    start, g->len);
    g->data_offset = start;
    uint64_t size = g->len - start;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor *t = &g->tensors[i];
        quote(t->name, strlen(t->name), q);
        if (t->offset % g->alignment)
            return FAIL(r,
                        "tensor '%s': offset %" PRIu64 " is not a multiple of the alignment "
                        "%" PRIu64,
                        q, t->offset, g->alignment);
        if (t->offset > size || t->n_bytes > size - t->offset)
            return FAIL(r,
                        "tensor '%s': data [%" PRIu64 ", +%" PRIu64 ") runs past the end of "
                        "the file (data section holds %" PRIu64 " bytes from offset %" PRIu64 ")",
                        q, t->offset, t->n_bytes, size, start);
        t->data = g->buf + start + t->offset;
    }
    const struct gguf_tensor **order = malloc((size_t)g->n_tensors * sizeof *order);
    if (!order) return NOMEM(r);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        order[i] = &g->tensors[i];
    qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_by_offset);
    int rc = PULSE_OK;
    const struct gguf_tensor *prev = NULL;
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        const struct gguf_tensor *t = order[i];
        if (t->n_bytes == 0) continue;
        if (prev && prev->offset + prev->n_bytes > t->offset)
            rc = FAIL(r,
                      "tensors '%s' and '%s' overlap (offsets %" PRIu64 " +%" PRIu64 " and %" PRIu64
                      ")",
                      quote(prev->name, strlen(prev->name), q), quote(t->name, strlen(t->name), q2),
                      prev->offset, prev->n_bytes, t->offset);
        prev = t;
    }
    free(order);
    return rc;
}

static int parse(struct gguf_file *g, char *err, size_t errlen)
{
    struct reader r = {g, 0, err, errlen};
    int rc;
    if ((rc = parse_header(&r)) || (rc = parse_kvs(&r))) return rc;
    g->tensors = arena_alloc(g, (size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *g->tensors);
    if (!g->tensors || index_init(g, &g->tensor_ix, g->n_tensors)) return NOMEM(&r);
    memset(g->tensors, 0, (size_t)g->n_tensors * sizeof *g->tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((rc = parse_tensor_info(&r, i))) return rc;
    return place_tensors(&r);
}

/* ---- open / free ---- */

static struct gguf_file *new_file(const char *label)
{
    struct gguf_file *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->label = strdup(label ? label : "(memory)");
    if (!g->label) {
        free(g);
        return NULL;
    }
    return g;
}

int gguf_open_memory(const void *buf, size_t len, const char *label, struct gguf_file **out,
                     char *err, size_t errlen)
{
    *out = NULL;
    struct gguf_file *g = new_file(label);
    if (!g) return set_err(err, errlen, PULSE_ERR_NOMEM, label, "out of memory");
    g->buf = buf;
    g->len = buf ? len : 0;
    int rc = parse(g, err, errlen);
    if (rc) {
        gguf_free(g);
        return rc;
    }
    *out = g;
    return PULSE_OK;
}

int gguf_open(const char *path, struct gguf_file **out, char *err, size_t errlen)
{
    *out = NULL;
    /* O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return set_err(err, errlen, PULSE_ERR_IO, path, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return set_err(err, errlen, PULSE_ERR_IO, path, "not a regular file");
    }
    struct gguf_file *g = new_file(path);
    if (!g) {
        close(fd);
        return set_err(err, errlen, PULSE_ERR_NOMEM, path, "out of memory");
    }
    g->len = (size_t)st.st_size;
    if (g->len > 0) {
        void *m = mmap(NULL, g->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            close(fd);
            gguf_free(g);
            return set_err(err, errlen, PULSE_ERR_IO, path, "cannot map %zu bytes: %s",
                           (size_t)st.st_size, strerror(errno));
        }
        g->map = m;
        g->buf = m;
    }
    close(fd);
    int rc = parse(g, err, errlen);
    if (rc) {
        gguf_free(g);
        return rc;
    }
    *out = g;
    return PULSE_OK;
}

void gguf_free(struct gguf_file *g)
{
    if (!g) return;
    if (g->map) munmap(g->map, g->len);
    while (g->arena) {
        struct chunk *c = g->arena;
        g->arena = c->next;
        free(c);
    }
    free(g->label);
    free(g);
}

/* ---- metadata ---- */

const char *gguf_label(const struct gguf_file *g)
{
    return g->label;
}
uint32_t gguf_version(const struct gguf_file *g)
{
    return g->version;
}
uint64_t gguf_alignment(const struct gguf_file *g)
{
    return g->alignment;
}
uint64_t gguf_data_offset(const struct gguf_file *g)
{
    return g->data_offset;
}
uint64_t gguf_kv_count(const struct gguf_file *g)
{
    return g->n_kv;
}

const char *gguf_kv_key(const struct gguf_file *g, uint64_t i)
{
    return i < g->n_kv ? g->kvs[i].key : NULL;
}

const struct gguf_value *gguf_kv_value(const struct gguf_file *g, uint64_t i)
{
    return i < g->n_kv ? &g->kvs[i].val : NULL;
}

const struct gguf_value *gguf_find_kv(const struct gguf_file *g, const char *key)
{
    int64_t i = index_lookup(g, &g->kv_ix, kv_name_at, key, -1);
    return i < 0 ? NULL : &g->kvs[i].val;
}

const char *gguf_type_name(uint32_t type)
{
    return type <= GGUF_TYPE_FLOAT64 ? VALUE_TYPES[type] : "invalid";
}

static int is_int_type(uint32_t t)
{
    return t <= GGUF_TYPE_INT32 || t == GGUF_TYPE_BOOL || t == GGUF_TYPE_UINT64 ||
           t == GGUF_TYPE_INT64;
}
static int is_signed_type(uint32_t t)
{
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

/* Integer of a scalar value: 0, or -1 when it is not an integer or does not fit int64. */
static int value_int(const struct gguf_value *v, int64_t *out)
{
    if (!is_int_type(v->type)) return -1;
    if (v->type == GGUF_TYPE_BOOL)
        *out = v->b;
    else if (is_signed_type(v->type))
        *out = v->i;
    else if (v->u > (uint64_t)INT64_MAX)
        return -1;
    else
        *out = (int64_t)v->u;
    return 0;
}

static const struct gguf_value *lookup(const struct gguf_file *g, const char *key, char *err,
                                       size_t errlen)
{
    const struct gguf_value *v = gguf_find_kv(g, key);
    if (!v) set_err(err, errlen, 0, g->label, "metadata key '%s' not found", key);
    return v;
}

#define WRONG(g, key, v, want)                                                                     \
    set_err(err, errlen, PULSE_ERR_INVALID, (g)->label, "metadata key '%s' is %s, expected %s",    \
            key, gguf_type_name((v)->type), want)

int gguf_get_int(const struct gguf_file *g, const char *key, int64_t *out, char *err, size_t errlen)
{
    const struct gguf_value *v = lookup(g, key, err, errlen);
    if (!v) return PULSE_ERR_INVALID;
    if (!is_int_type(v->type)) return WRONG(g, key, v, "an integer");
    if (value_int(v, out))
        return set_err(err, errlen, PULSE_ERR_INVALID, g->label,
                       "metadata key '%s' = %" PRIu64 " does not fit int64", key, v->u);
    return PULSE_OK;
}

int gguf_get_float(const struct gguf_file *g, const char *key, double *out, char *err,
                   size_t errlen)
{
    const struct gguf_value *v = lookup(g, key, err, errlen);
    int64_t i;
    if (!v) return PULSE_ERR_INVALID;
    if (v->type == GGUF_TYPE_FLOAT32 || v->type == GGUF_TYPE_FLOAT64)
        *out = v->f;
    else if (v->type != GGUF_TYPE_BOOL && value_int(v, &i) == 0)
        *out = (double)i;
    else if (v->type == GGUF_TYPE_UINT64)
        *out = (double)v->u;
    else
        return WRONG(g, key, v, "a number");
    return PULSE_OK;
}

int gguf_get_bool(const struct gguf_file *g, const char *key, int *out, char *err, size_t errlen)
{
    const struct gguf_value *v = lookup(g, key, err, errlen);
    if (!v) return PULSE_ERR_INVALID;
    if (v->type != GGUF_TYPE_BOOL) return WRONG(g, key, v, "bool");
    *out = v->b;
    return PULSE_OK;
}

int gguf_get_str(const struct gguf_file *g, const char *key, struct gguf_str *out, char *err,
                 size_t errlen)
{
    const struct gguf_value *v = lookup(g, key, err, errlen);
    if (!v) return PULSE_ERR_INVALID;
    if (v->type != GGUF_TYPE_STRING) return WRONG(g, key, v, "string");
    *out = v->s;
    return PULSE_OK;
}

int gguf_get_array(const struct gguf_file *g, const char *key, struct gguf_array *out, char *err,
                   size_t errlen)
{
    const struct gguf_value *v = lookup(g, key, err, errlen);
    if (!v) return PULSE_ERR_INVALID;
    if (v->type != GGUF_TYPE_ARRAY) return WRONG(g, key, v, "array");
    *out = v->a;
    return PULSE_OK;
}

/* Element i of a fixed-size array as a scalar value. */
static int array_scalar(const struct gguf_array *a, uint64_t i, struct gguf_value *v)
{
    if (i >= a->n || !a->data || a->type > GGUF_TYPE_FLOAT64 || !VALUE_SIZE[a->type])
        return PULSE_ERR_INVALID;
    decode_scalar(a->type, (const uint8_t *)a->data + i * VALUE_SIZE[a->type], v);
    return PULSE_OK;
}

int gguf_array_get_int(const struct gguf_array *a, uint64_t i, int64_t *out)
{
    struct gguf_value v;
    if (array_scalar(a, i, &v)) return PULSE_ERR_INVALID;
    return value_int(&v, out) ? PULSE_ERR_INVALID : PULSE_OK;
}

int gguf_array_get_float(const struct gguf_array *a, uint64_t i, double *out)
{
    struct gguf_value v;
    int64_t x;
    if (array_scalar(a, i, &v) || v.type == GGUF_TYPE_BOOL) return PULSE_ERR_INVALID;
    if (v.type == GGUF_TYPE_FLOAT32 || v.type == GGUF_TYPE_FLOAT64)
        *out = v.f;
    else if (value_int(&v, &x) == 0)
        *out = (double)x;
    else
        *out = (double)v.u; /* UINT64 above INT64_MAX */
    return PULSE_OK;
}

int gguf_array_get_str(const struct gguf_array *a, uint64_t i, struct gguf_str *out)
{
    if (a->type != GGUF_TYPE_STRING || i >= a->n || !a->strs) return PULSE_ERR_INVALID;
    *out = a->strs[i];
    return PULSE_OK;
}

int gguf_array_get_array(const struct gguf_array *a, uint64_t i, struct gguf_array *out)
{
    if (a->type != GGUF_TYPE_ARRAY || i >= a->n || !a->arrs) return PULSE_ERR_INVALID;
    *out = a->arrs[i];
    return PULSE_OK;
}

/* ---- tensors ---- */

uint64_t gguf_tensor_count(const struct gguf_file *g)
{
    return g->n_tensors;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *g, const char *name)
{
    int64_t i = index_lookup(g, &g->tensor_ix, tensor_name_at, name, -1);
    return i < 0 ? NULL : &g->tensors[i];
}
