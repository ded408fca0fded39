/* safetensors reader: see safetensors.h (config.json: safetensors_config.c). Headers are parsed
 * with Jansson (duplicate keys rejected); each file's JSON stays alive with the handle, so tensor
 * names and dtype strings point into it. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "numeric.h"

#define NAMEBUF 88
#define MAX_JSON_FILE (64u << 20) /* config.json and index files larger than this are refused */

struct st_file {
    char *label;
    const uint8_t *buf;
    size_t len;
    void *map;
    json_t *header;
    json_t *meta; /* borrowed from header */
};

struct safetensors {
    struct st_file *files;
    int n_files, cap_files;
    struct safetensors_tensor *tensors;
    uint64_t n, cap;
    json_t *index; /* name -> tensor index */
};

static const struct {
    const char *name;
    unsigned size;
    enum safetensors_dtype dtype;
} DTYPES[] = {
    {"F32", 4, SAFETENSORS_F32},       {"F16", 2, SAFETENSORS_F16},
    {"BF16", 2, SAFETENSORS_BF16},     {"F64", 8, SAFETENSORS_OTHER},
    {"I64", 8, SAFETENSORS_OTHER},     {"U64", 8, SAFETENSORS_OTHER},
    {"I32", 4, SAFETENSORS_OTHER},     {"U32", 4, SAFETENSORS_OTHER},
    {"I16", 2, SAFETENSORS_OTHER},     {"U16", 2, SAFETENSORS_OTHER},
    {"I8", 1, SAFETENSORS_OTHER},      {"U8", 1, SAFETENSORS_OTHER},
    {"BOOL", 1, SAFETENSORS_OTHER},    {"F8_E4M3", 1, SAFETENSORS_OTHER},
    {"F8_E5M2", 1, SAFETENSORS_OTHER}, {"F8_E8M0", 1, SAFETENSORS_OTHER},
    {"C64", 8, SAFETENSORS_OTHER},
};

/* ---- errors ---- */

#define set_err(err, errlen, code, label, ...)                                                     \
    pulse_errorf((err), (errlen), (code), (label) ? (label) : "(safetensors)", __VA_ARGS__)

/* A name for a message: control bytes become '?', cut at 80 bytes. */
static const char *quote(const char *s, char buf[NAMEBUF])
{
    size_t i = 0;
    for (; s[i] && i < 80; i++)
        buf[i] = ((unsigned char)s[i] < 32 || s[i] == 127) ? '?' : s[i];
    if (s[i]) memcpy(buf + i, "...", 3), i += 3;
    buf[i] = 0;
    return buf;
}

static const char *fmt_shape(const uint64_t *shape, int n, char *buf, size_t cap)
{
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRIu64, i ? ", " : "", shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

/* ---- files ---- */

/* Maps `path` read-only (a zero-length file maps to nothing). */
static int map_file(const char *path, void **map, size_t *len, char *err, size_t errlen)
{
    *map = NULL;
    *len = 0;
    /* O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return set_err(err, errlen, PULSE_ERR_IO, path, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return set_err(err, errlen, PULSE_ERR_IO, path, "not a regular file");
    }
    if (st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            close(fd);
            return set_err(err, errlen, PULSE_ERR_IO, path, "cannot map: %s", strerror(errno));
        }
        *map = m;
        *len = (size_t)st.st_size;
    }
    close(fd);
    return PULSE_OK;
}

/* Parses JSON from a file (at most MAX_JSON_FILE bytes). */
static int load_json_file(const char *path, json_t **out, char *err, size_t errlen)
{
    void *map;
    size_t len;
    json_error_t je;
    *out = NULL;
    int rc = map_file(path, &map, &len, err, errlen);
    if (rc) return rc;
    if (len > MAX_JSON_FILE)
        rc = set_err(err, errlen, PULSE_ERR_INVALID, path, "%zu bytes is too large for a JSON file",
                     len);
    else if (!(*out = json_loadb(map ? map : "", len, JSON_REJECT_DUPLICATES, &je)))
        rc = set_err(err, errlen, PULSE_ERR_INVALID, path, "bad JSON: %s (line %d, column %d)",
                     je.text, je.line, je.column);
    if (map) munmap(map, len);
    return rc;
}

static struct st_file *add_file(struct safetensors *st, const char *label)
{
    if (st->n_files == st->cap_files) {
        int cap = st->cap_files ? 2 * st->cap_files : 4;
        struct st_file *f = realloc(st->files, (size_t)cap * sizeof *f);
        if (!f) return NULL;
        st->files = f;
        st->cap_files = cap;
    }
    struct st_file *f = &st->files[st->n_files];
    memset(f, 0, sizeof *f);
    if (!(f->label = strdup(label ? label : "(memory)"))) return NULL;
    st->n_files++;
    return f;
}

/* ---- one file's header ---- */

static int dtype_lookup(const char *s, unsigned *size, enum safetensors_dtype *dt)
{
    for (size_t i = 0; i < PULSE_ARRAY_LEN(DTYPES); i++)
        if (strcmp(s, DTYPES[i].name) == 0) {
            *size = DTYPES[i].size;
            *dt = DTYPES[i].dtype;
            return 0;
        }
    return -1;
}

static int nonneg_int(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* Checks one header entry and appends it as a tensor of file fi. */
static int add_tensor(struct safetensors *st, int fi, const char *name, json_t *e, uint64_t dsize,
                      char *err, size_t errlen)
{
    const struct st_file *f = &st->files[fi];
    struct safetensors_tensor t = {.name = name, .file = f->label};
    char q[NAMEBUF], sh[256];
    uint64_t begin, end;
    unsigned size;
#define BAD(...) set_err(err, errlen, PULSE_ERR_INVALID, f->label, __VA_ARGS__)
    quote(name, q);
    if (!json_is_object(e)) return BAD("tensor '%s': header entry is not an object", q);
    json_t *dt = json_object_get(e, "dtype"), *shape = json_object_get(e, "shape"),
           *offs = json_object_get(e, "data_offsets");
    if (!json_is_string(dt)) return BAD("tensor '%s': \"dtype\" is missing or not a string", q);
    t.dtype_name = json_string_value(dt);
    if (dtype_lookup(t.dtype_name, &size, &t.dtype))
        return BAD("tensor '%s': unknown dtype \"%s\"", q, quote(t.dtype_name, sh));
    if (!json_is_array(shape)) return BAD("tensor '%s': \"shape\" is missing or not an array", q);
    if (json_array_size(shape) > SAFETENSORS_MAX_DIMS)
        return BAD("tensor '%s': shape has %zu dimensions (max %d)", q, json_array_size(shape),
                   SAFETENSORS_MAX_DIMS);
    t.n_dims = (int)json_array_size(shape);
    int empty = 0, overflow = 0;
    t.n_elems = 1;
    for (int i = 0; i < t.n_dims; i++) {
        if (nonneg_int(json_array_get(shape, (size_t)i), &t.shape[i]))
            return BAD("tensor '%s': shape must be an array of non-negative integers", q);
        if (t.shape[i] == 0)
            empty = 1;
        else if (t.n_elems > UINT64_MAX / t.shape[i])
            overflow = 1;
        else
            t.n_elems *= t.shape[i];
    }
    fmt_shape(t.shape, t.n_dims, sh, sizeof sh);
    if (empty)
        t.n_elems = 0;
    else if (overflow || t.n_elems > UINT64_MAX / size)
        return BAD("tensor '%s': shape %s of %s overflows 64 bits", q, sh, t.dtype_name);
    t.n_bytes = t.n_elems * size;
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        nonneg_int(json_array_get(offs, 0), &begin) || nonneg_int(json_array_get(offs, 1), &end) ||
        begin > end)
        return BAD("tensor '%s': \"data_offsets\" must be [begin, end] with 0 <= begin <= end", q);
    if (end > dsize)
        return BAD("tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 ") run past the end of the "
                   "data section (%" PRIu64 " bytes)",
                   q, begin, end, dsize);
    if (end - begin != t.n_bytes)
        return BAD("tensor '%s': shape %s of %s needs %" PRIu64 " bytes but data_offsets [%" PRIu64
                   ", %" PRIu64 ") hold %" PRIu64,
                   q, sh, t.dtype_name, t.n_bytes, begin, end, end - begin);
    t.data = f->buf + (f->len - dsize) + begin;
    json_t *prev = json_object_get(st->index, name);
    if (prev)
        return BAD("tensor '%s' is also in %s", q, st->tensors[json_integer_value(prev)].file);
#undef BAD
    if (st->n == st->cap) {
        uint64_t cap = st->cap ? 2 * st->cap : 64;
        struct safetensors_tensor *p = realloc(st->tensors, (size_t)cap * sizeof *p);
        if (!p) return set_err(err, errlen, PULSE_ERR_NOMEM, f->label, "out of memory");
        st->tensors = p;
        st->cap = cap;
    }
    if (json_object_set_new(st->index, name, json_integer((json_int_t)st->n)))
        return set_err(err, errlen, PULSE_ERR_NOMEM, f->label, "out of memory");
    st->tensors[st->n++] = t;
    return PULSE_OK;
}

static int cmp_data(const void *a, const void *b)
{
    const struct safetensors_tensor *x = *(const struct safetensors_tensor *const *)a;
    const struct safetensors_tensor *y = *(const struct safetensors_tensor *const *)b;
    if (x->data != y->data) return x->data < y->data ? -1 : 1;
    return x->n_bytes < y->n_bytes ? -1 : (x->n_bytes > y->n_bytes);
}

/* No two non-empty tensors of one file share a byte. */
static int check_overlap(struct safetensors *st, uint64_t first, const struct st_file *f, char *err,
                         size_t errlen)
{
    uint64_t n = st->n - first;
    if (n < 2) return PULSE_OK;
    const struct safetensors_tensor **v = malloc((size_t)n * sizeof *v);
    if (!v) return set_err(err, errlen, PULSE_ERR_NOMEM, f->label, "out of memory");
    for (uint64_t i = 0; i < n; i++)
        v[i] = &st->tensors[first + i];
    qsort(v, (size_t)n, sizeof *v, cmp_data);
    int rc = PULSE_OK;
    const struct safetensors_tensor *prev = NULL;
    for (uint64_t i = 0; i < n && !rc; i++) {
        if (v[i]->n_bytes == 0) continue;
        if (prev && prev->data + prev->n_bytes > v[i]->data) {
            char q1[NAMEBUF], q2[NAMEBUF];
            rc = set_err(err, errlen, PULSE_ERR_INVALID, f->label,
                         "tensors '%s' and '%s' overlap in the data section", quote(prev->name, q1),
                         quote(v[i]->name, q2));
        }
        prev = v[i];
    }
    free(v);
    return rc;
}

/* Parses the header of file fi (already mapped) and appends its tensors. */
static int parse_file(struct safetensors *st, int fi, char *err, size_t errlen)
{
    struct st_file *f = &st->files[fi];
    uint64_t hlen;
    json_error_t je;
    uint64_t first = st->n;
    if (f->len < 8)
        return set_err(err, errlen, PULSE_ERR_INVALID, f->label,
                       "%zu bytes is too short for a safetensors file (8-byte header length)",
                       f->len);
    memcpy(&hlen, f->buf, 8); /* little-endian, as is the host */
    if (hlen > SAFETENSORS_MAX_HEADER)
        return set_err(err, errlen, PULSE_ERR_INVALID, f->label,
                       "header length %" PRIu64 " exceeds the %u-byte limit", hlen,
                       SAFETENSORS_MAX_HEADER);
    if (hlen > f->len - 8)
        return set_err(err, errlen, PULSE_ERR_INVALID, f->label,
                       "header length %" PRIu64 " runs past the end of the file (%zu bytes)", hlen,
                       f->len);
    f->header = json_loadb((const char *)f->buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!f->header)
        return set_err(err, errlen, PULSE_ERR_INVALID, f->label,
                       "bad JSON header: %s (line %d, column %d)", je.text, je.line, je.column);
    if (!json_is_object(f->header))
        return set_err(err, errlen, PULSE_ERR_INVALID, f->label, "JSON header is not an object");
    uint64_t dsize = f->len - 8 - hlen;
    const char *key;
    json_t *val;
    json_object_foreach(f->header, key, val)
    {
        if (strcmp(key, "__metadata__") == 0) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(val))
                return set_err(err, errlen, PULSE_ERR_INVALID, f->label,
                               "\"__metadata__\" is not an object");
            json_object_foreach(val, mk, mv)
            {
                char q[NAMEBUF];
                if (!json_is_string(mv))
                    return set_err(err, errlen, PULSE_ERR_INVALID, f->label,
                                   "\"__metadata__\" value of '%s' is not a string", quote(mk, q));
            }
            f->meta = val;
            continue;
        }
        int rc = add_tensor(st, fi, key, val, dsize, err, errlen);
        if (rc) return rc;
    }
    return check_overlap(st, first, f, err, errlen);
}

/* ---- opening ---- */

static struct safetensors *new_handle(void)
{
    struct safetensors *st = calloc(1, sizeof *st);
    if (st && !(st->index = json_object())) {
        free(st);
        st = NULL;
    }
    return st;
}

/* Maps and parses one file of the model. */
static int open_one(struct safetensors *st, const char *path, char *err, size_t errlen)
{
    struct st_file *f = add_file(st, path);
    if (!f) return set_err(err, errlen, PULSE_ERR_NOMEM, path, "out of memory");
    int rc = map_file(path, &f->map, &f->len, err, errlen);
    if (rc) return rc;
    f->buf = f->map;
    return parse_file(st, st->n_files - 1, err, errlen);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A shard name must be a plain file name in the model directory. */
static int plain_name(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Opens every shard the index names (in sorted order), then checks that each tensor of the
 * weight_map is in the shard it names. */
static int open_index(struct safetensors *st, const char *index_path, const char *dir, char *err,
                      size_t errlen)
{
    json_t *root, *wm, *v, *seen = NULL;
    const char *name, **shards = NULL;
    char q[NAMEBUF], q2[NAMEBUF];
    size_t n_shards = 0;
    int rc = load_json_file(index_path, &root, err, errlen);
    if (rc) return rc;
#define BAD(...) (rc = set_err(err, errlen, PULSE_ERR_INVALID, index_path, __VA_ARGS__))
    wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        BAD("no \"weight_map\" object with at least one tensor");
        goto done;
    }
    seen = json_object();
    shards = malloc(json_object_size(wm) * sizeof *shards);
    if (!seen || !shards) {
        rc = set_err(err, errlen, PULSE_ERR_NOMEM, index_path, "out of memory");
        goto done;
    }
    json_object_foreach(wm, name, v)
    {
        if (!json_is_string(v)) {
            BAD("weight_map entry of tensor '%s' is not a string", quote(name, q));
            break;
        }
        if (!plain_name(json_string_value(v))) {
            BAD("weight_map entry of tensor '%s' names shard '%s', which is not a plain file "
                "name",
                quote(name, q), quote(json_string_value(v), q2));
            break;
        }
        if (!json_object_get(seen, json_string_value(v))) {
            json_object_set_new(seen, json_string_value(v), json_true());
            shards[n_shards++] = json_string_value(v);
        }
    }
    qsort(shards, n_shards, sizeof *shards, cmp_str);
    for (size_t i = 0; i < n_shards && !rc; i++) {
        char *path = join(dir, shards[i]);
        rc = path ? open_one(st, path, err, errlen)
                  : set_err(err, errlen, PULSE_ERR_NOMEM, index_path, "out of memory");
        free(path);
    }
    json_object_foreach(wm, name, v)
    {
        if (rc) break;
        const struct safetensors_tensor *t = safetensors_find_tensor(st, name);
        const char *base = t ? strrchr(t->file, '/') : NULL;
        base = base ? base + 1 : (t ? t->file : NULL);
        if (!t)
            BAD("tensor '%s' is listed for shard %s, which does not hold it", quote(name, q),
                json_string_value(v));
        else if (strcmp(base, json_string_value(v)) != 0)
            BAD("tensor '%s' is listed for shard %s but is in %s", quote(name, q),
                json_string_value(v), t->file);
    }
#undef BAD
done:
    json_decref(seen);
    free(shards);
    json_decref(root);
    return rc;
}

static int exists(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0;
}

static int open_path(struct safetensors *st, const char *path, char *err, size_t errlen)
{
    struct stat s;
    if (stat(path, &s) != 0)
        return set_err(err, errlen, PULSE_ERR_IO, path, "cannot open: %s", strerror(errno));
    size_t n = strlen(path);
    if (!S_ISDIR(s.st_mode)) {
        if (n >= 11 && strcmp(path + n - 11, ".index.json") == 0) {
            char *dir = strdup(path), *slash = dir ? strrchr(dir, '/') : NULL;
            if (!dir) return set_err(err, errlen, PULSE_ERR_NOMEM, path, "out of memory");
            if (slash) *slash = 0;
            int rc = open_index(st, path, slash ? dir : ".", err, errlen);
            free(dir);
            return rc;
        }
        return open_one(st, path, err, errlen);
    }
    char *index = join(path, "model.safetensors.index.json"),
         *single = join(path, "model.safetensors");
    int rc;
    if (!index || !single)
        rc = set_err(err, errlen, PULSE_ERR_NOMEM, path, "out of memory");
    else if (exists(index))
        rc = open_index(st, index, path, err, errlen);
    else if (exists(single))
        rc = open_one(st, single, err, errlen);
    else
        rc = set_err(err, errlen, PULSE_ERR_IO, path,
                     "no model.safetensors or model.safetensors.index.json in this directory");
    free(index);
    free(single);
    return rc;
}

int safetensors_open(const char *path, struct safetensors **out, char *err, size_t errlen)
{
    *out = NULL;
    struct safetensors *st = new_handle();
    if (!st) return set_err(err, errlen, PULSE_ERR_NOMEM, path, "out of memory");
    int rc = open_path(st, path, err, errlen);
    if (rc)
        safetensors_free(st);
    else
        *out = st;
    return rc;
}

int safetensors_open_memory(const void *buf, size_t len, const char *label,
                            struct safetensors **out, char *err, size_t errlen)
{
    *out = NULL;
    struct safetensors *st = new_handle();
    struct st_file *f = st ? add_file(st, label) : NULL;
    if (!f) {
        safetensors_free(st);
        return set_err(err, errlen, PULSE_ERR_NOMEM, label, "out of memory");
    }
    f->buf = buf;
    f->len = buf ? len : 0;
    int rc = parse_file(st, 0, err, errlen);
    if (rc)
        safetensors_free(st);
    else
        *out = st;
    return rc;
}

void safetensors_free(struct safetensors *st)
{
    if (!st) return;
    for (int i = 0; i < st->n_files; i++) {
        struct st_file *f = &st->files[i];
        if (f->map) munmap(f->map, f->len);
        json_decref(f->header);
        free(f->label);
    }
    free(st->files);
    free(st->tensors);
    json_decref(st->index);
    free(st);
}

/* ---- lookup and reading ---- */

uint64_t safetensors_tensor_count(const struct safetensors *st)
{
    return st->n;
}

const struct safetensors_tensor *safetensors_tensor_at(const struct safetensors *st, uint64_t i)
{
    return i < st->n ? &st->tensors[i] : NULL;
}

const struct safetensors_tensor *safetensors_find_tensor(const struct safetensors *st,
                                                         const char *name)
{
    json_t *i = json_object_get(st->index, name);
    return i ? &st->tensors[json_integer_value(i)] : NULL;
}

const char *safetensors_metadata(const struct safetensors *st, const char *key)
{
    for (int i = 0; i < st->n_files; i++) {
        json_t *v = st->files[i].meta ? json_object_get(st->files[i].meta, key) : NULL;
        if (v) return json_string_value(v);
    }
    return NULL;
}

/* IEEE half -> float, exact for every input. */
static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    float f;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        u = sign | ((e + 112) << 23) | (m << 13);
    } else {
        f = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
        memcpy(&u, &f, 4);
        u |= sign;
    }
    memcpy(&f, &u, 4);
    return f;
}

static int check_read(const struct safetensors_tensor *t, uint64_t cap, char *err, size_t errlen)
{
    char q[NAMEBUF];
    if (t->dtype == SAFETENSORS_OTHER)
        return set_err(err, errlen, PULSE_ERR_INVALID, t->file,
                       "tensor '%s' has dtype %s; only BF16, F16 and F32 can be read",
                       quote(t->name, q), t->dtype_name);
    if (cap < t->n_elems)
        return set_err(err, errlen, PULSE_ERR_INVALID, t->file,
                       "tensor '%s' has %" PRIu64 " elements but the destination holds %" PRIu64,
                       quote(t->name, q), t->n_elems, cap);
    return PULSE_OK;
}

int safetensors_read_f32(const struct safetensors *st, const struct safetensors_tensor *t,
                         float *dst, uint64_t cap, char *err, size_t errlen)
{
    (void)st;
    int rc = check_read(t, cap, err, errlen);
    if (rc || t->n_elems == 0) return rc;
    const uint8_t *p = t->data;
    if (t->dtype == SAFETENSORS_F32) {
        memcpy(dst, p, (size_t)t->n_bytes);
        return PULSE_OK;
    }
    for (uint64_t i = 0; i < t->n_elems; i++) {
        uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        dst[i] = t->dtype == SAFETENSORS_F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    return PULSE_OK;
}

int safetensors_read_bf16(const struct safetensors *st, const struct safetensors_tensor *t,
                          uint16_t *dst, uint64_t cap, char *err, size_t errlen)
{
    (void)st;
    int rc = check_read(t, cap, err, errlen);
    if (rc || t->n_elems == 0) return rc;
    const uint8_t *p = t->data;
    if (t->dtype == SAFETENSORS_BF16) {
        memcpy(dst, p, (size_t)t->n_bytes);
        return PULSE_OK;
    }
    for (uint64_t i = 0; i < t->n_elems; i++) {
        float f;
        if (t->dtype == SAFETENSORS_F32)
            memcpy(&f, p + 4 * i, 4);
        else
            f = f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        dst[i] = f32_to_bf16(f);
    }
    return PULSE_OK;
}
