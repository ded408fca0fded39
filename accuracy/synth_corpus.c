/* Filler sentences from plain-text documents: the directory walk, the file filter and the
 * cleaning described in synth_corpus.h. */
#include "accuracy/synth_corpus.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "numeric.h"

#define MAX_FILE_BYTES (1u << 20)
#define MAX_TEXT_BYTES ((size_t)32 << 20)
#define SNIFF_BYTES 8192
#define MIN_SENTENCE 24
#define MAX_SENTENCE 320

struct sent {
    size_t off;
    uint32_t len;
    uint8_t para;
};

struct synth_corpus {
    char *buf; /* the kept sentences, each NUL-terminated */
    size_t len, cap;
    struct sent *v;
    size_t n, vcap;
    uint64_t *set; /* open addressing over sentence hashes (0 = empty slot) */
    size_t set_n, set_cap;
    char *para; /* the paragraph being joined */
    size_t para_len, para_cap;
    int next_para; /* the next kept sentence starts a paragraph */
    int nomem;
    struct synth_corpus_stats st;
};

static const char *const COMPRESSED[] = {"gz", "bz2", "xz",  "zst", "lz", "lzma",
                                         "z",  "zip", "tgz", "7z",  "br"};
static const char *const NOT_TEXT[] = {
    "html", "htm",  "xhtml", "css", "js",   "json",  "xml",  "svg", "png",  "jpg",  "jpeg",
    "gif",  "ico",  "pdf",   "ps",  "eps",  "dvi",   "py",   "pl",  "pm",   "rb",   "sh",
    "c",    "h",    "cc",    "cpp", "hpp",  "java",  "go",   "rs",  "el",   "tcl",  "lua",
    "m4",   "in",   "am",    "ac",  "mk",   "cmake", "conf", "cfg", "ini",  "diff", "patch",
    "deb",  "so",   "a",     "o",   "bin",  "dat",   "db",   "mo",  "po",   "pot",  "gmo",
    "tex",  "info", "pem",   "crt", "key",  "sig",   "asc",  "doc", "docx", "odt",  "rtf",
    "xsl",  "xslt", "sgml",  "yml", "yaml", "toml",  "csv",  "tsv"};
/* Debian copyright-format field names: such a line starts a paragraph that is not prose. */
static const char *const DEP5_FIELDS[] = {
    "Format:",           "Files:",  "Copyright:", "License:",    "Upstream-Name:",
    "Upstream-Contact:", "Source:", "Comment:",   "Disclaimer:", "Upstream-Author:"};
static const char *const ABBREV[] = {"e.g", "i.e", "etc", "vs", "mr",     "mrs",  "dr", "no",
                                     "cf",  "st",  "jr",  "sr", "approx", "incl", "fig"};

const char *const *synth_corpus_default_paths(size_t *n)
{
    static const char *const paths[] = {"/usr/share/doc", "/usr/share/common-licenses"};
    *n = 2;
    return paths;
}

size_t synth_corpus_count(const struct synth_corpus *c)
{
    return c ? c->n : 0;
}

const char *synth_corpus_sentence(const struct synth_corpus *c, size_t i, size_t *len,
                                  int *para_start)
{
    *len = c->v[i].len;
    *para_start = c->v[i].para;
    return c->buf + c->v[i].off;
}

void synth_corpus_stats(const struct synth_corpus *c, struct synth_corpus_stats *out)
{
    *out = c->st;
}

void synth_corpus_free(struct synth_corpus *c)
{
    if (!c) return;
    free(c->buf);
    free(c->v);
    free(c->set);
    free(c->para);
    free(c);
}

/* ---------------------------------------------------------------- sentences */

static uint64_t fnv1a(const char *s, size_t n)
{
    return pulse_fnv1a_bytes(PULSE_FNV_INIT, s, n) | 1; /* never 0, the empty slot */
}

/* Inserts h; 1 if it was new, 0 if present, -1 out of memory. */
static int set_insert(struct synth_corpus *c, uint64_t h)
{
    if (2 * (c->set_n + 1) > c->set_cap) {
        size_t cap = c->set_cap ? 2 * c->set_cap : 4096;
        uint64_t *t = calloc(cap, sizeof *t);
        if (!t) return -1;
        for (size_t i = 0; i < c->set_cap; i++) {
            if (!c->set[i]) continue;
            size_t k = c->set[i] & (cap - 1);
            while (t[k])
                k = (k + 1) & (cap - 1);
            t[k] = c->set[i];
        }
        free(c->set);
        c->set = t, c->set_cap = cap;
    }
    size_t k = h & (c->set_cap - 1);
    while (c->set[k]) {
        if (c->set[k] == h) return 0;
        k = (k + 1) & (c->set_cap - 1);
    }
    c->set[k] = h;
    c->set_n++;
    return 1;
}

/* The sentence test of synth_corpus.h on s[0..n). */
static int sentence_ok(const char *s, size_t n)
{
    if (n < MIN_SENTENCE || n > MAX_SENTENCE || !isupper((unsigned char)s[0])) return 0;
    size_t letters = 0, nonspace = 0, words = 1, symbols = 0;
    int parens = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch > 0x7e || strchr("<>{}[]|\\`=#*_~^", ch)) return 0;
        if (ch == ' ') {
            words++;
            continue;
        }
        nonspace++;
        letters += isalpha(ch) != 0;
        symbols += !isalnum(ch) && !strchr(".,'\"", ch);
        parens += (ch == '(') - (ch == ')');
        if (parens < 0) return 0;
    }
    size_t e = n;
    while (e > 0 && (s[e - 1] == '"' || s[e - 1] == '\'' || s[e - 1] == ')'))
        e--;
    if (e == 0 || !strchr(".!?", s[e - 1]) || words < 4 || parens || letters * 10 < nonspace * 6 ||
        symbols * 100 > nonspace * 8)
        return 0;
    char tmp[MAX_SENTENCE + 1];
    memcpy(tmp, s, n);
    tmp[n] = 0;
    return !strcasestr(tmp, "pass key") && !strcasestr(tmp, "special magic") &&
           !strstr(tmp, "VAR ");
}

static void keep_sentence(struct synth_corpus *c, const char *s, size_t n, size_t *kept)
{
    int para = c->next_para; /* a sentence after a dropped one starts a new line too */
    c->next_para = 1;
    if (!sentence_ok(s, n)) return;
    int fresh = set_insert(c, fnv1a(s, n));
    if (fresh <= 0) {
        if (fresh < 0) c->nomem = 1;
        c->st.duplicates += fresh == 0;
        return;
    }
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? 2 * c->cap : (1u << 20);
        while (cap < c->len + n + 1)
            cap *= 2;
        char *b = realloc(c->buf, cap);
        if (!b) goto nomem;
        c->buf = b, c->cap = cap;
    }
    if (c->n == c->vcap) {
        size_t cap = c->vcap ? 2 * c->vcap : 4096;
        struct sent *v = realloc(c->v, cap * sizeof *v);
        if (!v) goto nomem;
        c->v = v, c->vcap = cap;
    }
    memcpy(c->buf + c->len, s, n);
    c->buf[c->len + n] = 0;
    c->v[c->n++] = (struct sent){c->len, (uint32_t)n, (uint8_t)(para || c->n == 0)};
    c->len += n + 1;
    c->st.sentences++;
    c->st.text_bytes += n;
    (*kept)++;
    c->next_para = 0;
    return;
nomem:
    c->nomem = 1;
}

/* Is the '.' at p[i] an abbreviation or an initial rather than a sentence end? */
static int is_abbrev(const char *p, size_t i)
{
    size_t b = i;
    while (b > 0 && p[b - 1] != ' ')
        b--;
    size_t wl = i - b;
    if (wl == 1 && isalpha((unsigned char)p[b])) return 1;
    for (size_t k = 0; k < PULSE_ARRAY_LEN(ABBREV); k++)
        if (strlen(ABBREV[k]) == wl && strncasecmp(p + b, ABBREV[k], wl) == 0) return 1;
    return 0;
}

/* Cuts the joined paragraph into sentences and keeps the good ones. */
static void flush_paragraph(struct synth_corpus *c, size_t *kept)
{
    const char *p = c->para;
    size_t n = c->para_len, start = 0;
    c->next_para = 1;
    for (size_t i = 0; i < n; i++) {
        if (!strchr(".!?", p[i])) continue;
        size_t j = i + 1;
        while (j < n && (p[j] == '"' || p[j] == '\'' || p[j] == ')'))
            j++;
        if (j < n) {
            unsigned char nx = j + 1 < n ? (unsigned char)p[j + 1] : 0;
            if (p[j] != ' ' || !(isupper(nx) || isdigit(nx) || nx == '"' || nx == '(')) continue;
            if (p[i] == '.' && is_abbrev(p, i)) continue;
        }
        keep_sentence(c, p + start, j - start, kept);
        start = j + 1;
        i = j;
    }
    if (start < n) keep_sentence(c, p + start, n - start, kept);
    c->para_len = 0;
    c->next_para = 1;
}

/* Appends a trimmed line to the paragraph, collapsing whitespace. */
static void append_line(struct synth_corpus *c, const char *s, size_t n)
{
    if (c->para_len + n + 2 > c->para_cap) {
        size_t cap = (c->para_len + n + 2) * 2;
        char *p = realloc(c->para, cap);
        if (!p) {
            c->nomem = 1;
            return;
        }
        c->para = p, c->para_cap = cap;
    }
    if (c->para_len) c->para[c->para_len++] = ' ';
    for (size_t i = 0; i < n; i++) {
        char ch = isspace((unsigned char)s[i]) ? ' ' : s[i];
        if (ch == ' ' && c->para_len && c->para[c->para_len - 1] == ' ') continue;
        c->para[c->para_len++] = ch;
    }
}

static int is_dep5_field(const char *s, size_t n)
{
    for (size_t k = 0; k < PULSE_ARRAY_LEN(DEP5_FIELDS); k++) {
        size_t fl = strlen(DEP5_FIELDS[k]);
        if (n >= fl && strncmp(s, DEP5_FIELDS[k], fl) == 0) return 1;
    }
    return 0;
}

/* Cleans one document; returns the number of sentences kept. */
static size_t add_text(struct synth_corpus *c, const char *text, size_t len)
{
    size_t kept = 0, pos = 0;
    c->para_len = 0;
    c->next_para = 1;
    while (pos < len && !c->nomem) {
        const char *line = text + pos, *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        pos += n + (nl ? 1 : 0);
        while (n && isspace((unsigned char)line[n - 1]))
            n--;
        while (n && isspace((unsigned char)*line))
            line++, n--;
        size_t letters = 0, nonspace = 0;
        for (size_t i = 0; i < n; i++) {
            letters += isalpha((unsigned char)line[i]) != 0;
            nonspace += !isspace((unsigned char)line[i]);
        }
        if (n == 0 || letters < 2 || 2 * letters < nonspace || is_dep5_field(line, n)) {
            if (c->para_len) flush_paragraph(c, &kept);
            continue;
        }
        append_line(c, line, n);
    }
    if (c->para_len && !c->nomem) flush_paragraph(c, &kept);
    return kept;
}

/* ---------------------------------------------------------------- files */

static int has_ext(const char *name, const char *const *list, size_t n)
{
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name) return 0;
    for (size_t k = 0; k < n; k++)
        if (strcasecmp(dot + 1, list[k]) == 0) return 1;
    return 0;
}

/* NUL in the first bytes or more than 2% control bytes: not plain text. */
static int looks_binary(const char *b, size_t n)
{
    size_t m = n < SNIFF_BYTES ? n : SNIFF_BYTES, ctl = 0;
    for (size_t i = 0; i < m; i++) {
        unsigned char ch = (unsigned char)b[i];
        if (ch == 0) return 1;
        ctl += (ch < 0x20 && !strchr("\t\n\r\f", ch)) || ch == 0x7f;
    }
    return ctl * 50 > m;
}

static void add_file(struct synth_corpus *c, const char *path, const char *name, int explicit)
{
    c->st.files_seen++;
    if (!explicit && has_ext(name, COMPRESSED, PULSE_ARRAY_LEN(COMPRESSED))) {
        c->st.files_compressed++;
        return;
    }
    if (!explicit && has_ext(name, NOT_TEXT, PULSE_ARRAY_LEN(NOT_TEXT))) {
        c->st.files_other++;
        return;
    }
    /* a FIFO or a device is no corpus file (and would block the read) */
    FILE *f = pulse_check_regular(path, "corpus file", NULL, 0) == PULSE_OK ? fopen(path, "rb") : NULL;
    char *b = f ? malloc(MAX_FILE_BYTES) : NULL;
    size_t n = b ? fread(b, 1, MAX_FILE_BYTES, f) : 0;
    if (f) fclose(f);
    if (f && !b) c->nomem = 1;
    c->st.bytes_read += n;
    if (!b || n == 0 || looks_binary(b, n)) {
        c->st.files_binary += b != NULL && n > 0;
        free(b);
        return;
    }
    if (add_text(c, b, n)) c->st.files_used++;
    free(b);
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static void walk_dir(struct synth_corpus *c, const char *dir)
{
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, NULL, by_name);
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        size_t need = strlen(dir) + strlen(name) + 2;
        char *path = malloc(need);
        struct stat st;
        if (!path) c->nomem = 1;
        if (path && strcmp(name, ".") && strcmp(name, "..") && !c->nomem &&
            c->st.text_bytes < MAX_TEXT_BYTES) {
            snprintf(path, need, "%s/%s", dir, name);
            if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
                walk_dir(c, path);
            else if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
                add_file(c, path, name, 0);
        }
        free(path);
        free(ents[i]);
    }
    free(ents);
}

static int finish(struct synth_corpus *c, const char *name, struct synth_corpus **out, char *err,
                  size_t errlen)
{
    if (c->nomem) {
        snprintf(err, errlen, "%s: out of memory loading the corpus", name);
        synth_corpus_free(c);
        return PULSE_ERR_NOMEM;
    }
    if (c->n == 0) {
        snprintf(err, errlen,
                 "%s: no usable plain text (%zu files seen, %zu compressed skipped, %zu "
                 "binary)",
                 name, c->st.files_seen, c->st.files_compressed, c->st.files_binary);
        synth_corpus_free(c);
        return PULSE_ERR_INVALID;
    }
    free(c->set), c->set = NULL, c->set_cap = c->set_n = 0;
    free(c->para), c->para = NULL, c->para_cap = 0;
    *out = c;
    return PULSE_OK;
}

int synth_corpus_load(const char *const *paths, size_t n_paths, struct synth_corpus **out,
                      char *err, size_t errlen)
{
    *out = NULL;
    struct synth_corpus *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory loading the corpus");
        return PULSE_ERR_NOMEM;
    }
    for (size_t i = 0; i < n_paths; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0) {
            snprintf(err, errlen, "%s: cannot open: %s", paths[i], strerror(errno));
            synth_corpus_free(c);
            return PULSE_ERR_IO;
        }
        if (S_ISDIR(st.st_mode))
            walk_dir(c, paths[i]);
        else
            add_file(c, paths[i], paths[i], 1);
    }
    return finish(c, n_paths ? paths[0] : "(no path)", out, err, errlen);
}

int synth_corpus_from_text(const char *name, const char *text, size_t len,
                           struct synth_corpus **out, char *err, size_t errlen)
{
    *out = NULL;
    struct synth_corpus *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory loading the corpus");
        return PULSE_ERR_NOMEM;
    }
    c->st.files_seen = 1;
    if (add_text(c, text, len)) c->st.files_used = 1;
    c->st.bytes_read = len;
    return finish(c, name ? name : "(memory)", out, err, errlen);
}
