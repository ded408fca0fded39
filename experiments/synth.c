/* pulse synth: writes RULER-style synthetic tasks as LongBench JSONL files (accuracy/synth.h),
 * one file per task and length: OUT_DIR/<task>_<length>.jsonl. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "accuracy/gguf.h"
#include "accuracy/synth.h"
#include "accuracy/tokenizer.h"
#include "cli.h"
#include "common.h"

#define MAX_LENGTHS 32
#define MAX_CORPUS 16

static const char usage[] =
    "usage: pulse synth --task T --length N [--length N ...] --out-dir DIR [options]\n"
    "  Generates synthetic long-context samples (RULER-style) in the LongBench JSONL format,\n"
    "  one file per task and length: DIR/<task>_<length>.jsonl. Each record has input, context,\n"
    "  answers, length (words), all_classes (null), dataset, language, _id, plus depth (of the\n"
    "  queried needle, 0..1 of the context bytes), depths, tokens and target_tokens.\n"
    "  The prompt (the task's template in accuracy/longbench.c) plus the task's max new tokens\n"
    "  fits in N tokens, counted as ceil(bytes / 4), or by --tokenizer's.\n"
    "  --task T        passkey, niah_multikey, variable_tracking, kv_retrieval or all\n"
    "                  (repeatable)\n"
    "  --length N      target tokens, >= 256 (repeatable, up to 32)\n"
    "  --samples N     samples per file (default 100)\n"
    "  --seed S        seed (default 1); the same seed and corpus give the same files\n"
    "  --corpus PATH   filler documents: a directory walked recursively or a file\n"
    "                  (repeatable; default /usr/share/doc and /usr/share/common-licenses)\n"
    "  --out-dir DIR   where the files go (created if missing; required)\n"
    "  --tokenizer F   count tokens with the tokenizer of the model file F.gguf (with BOS)\n"
    "exit: 0 ok, 1 run failed, 2 bad usage or no usable corpus, 3 out of memory\n";

struct synth_opts {
    int tasks[SYNTH_TASK_COUNT]; /* selected */
    long lengths[MAX_LENGTHS];
    int n_lengths;
    long samples;
    uint64_t seed;
    const char *corpus[MAX_CORPUS];
    int n_corpus;
    const char *out_dir;
    const char *tokenizer; /* a .gguf whose tokenizer counts the tokens */
};

static int parse_task(const char *C, const char *s, struct synth_opts *o)
{
    if (strcmp(s, "all") == 0) {
        for (int t = 0; t < SYNTH_TASK_COUNT; t++)
            o->tasks[t] = 1;
        return 0;
    }
    int t = synth_task_find(s);
    if (t < 0) {
        cli_error(C,
                  "--task: unknown task '%s' (known: passkey, niah_multikey, "
                  "variable_tracking, kv_retrieval, all)",
                  s);
        return -1;
    }
    o->tasks[t] = 1;
    return 0;
}

static int parse(int argc, char **argv, struct synth_opts *o)
{
    static const struct option opts[] = {{"task", required_argument, 0, 't'},
                                         {"length", required_argument, 0, 'l'},
                                         {"samples", required_argument, 0, 'n'},
                                         {"seed", required_argument, 0, 's'},
                                         {"corpus", required_argument, 0, 'c'},
                                         {"out-dir", required_argument, 0, 'o'},
                                         {"tokenizer", required_argument, 0, 'k'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->samples = 100, o->seed = 1;
    const char *C = "synth";
    int c, any_task = 0;
    opterr = 0;
    optind = 1;
    struct cli_seen seen = {.repeatable = "task,length,corpus"};
    while ((c = cli_getopt(C, argc, argv, opts, &seen)) != -1) {
        int bad = 0;
        switch (c) {
        case 't':
            bad = parse_task(C, optarg, o), any_task = 1;
            break;
        case 'l':
            if (o->n_lengths == MAX_LENGTHS) {
                cli_error(C, "--length: at most %d lengths", MAX_LENGTHS);
                return -1;
            }
            bad = cli_int(C, "--length", optarg, 256, 1L << 24, &o->lengths[o->n_lengths++]);
            break;
        case 'n':
            bad = cli_int(C, "--samples", optarg, 1, 1000000, &o->samples);
            break;
        case 's':
            bad = cli_u64(C, "--seed", optarg, UINT64_MAX, &o->seed);
            break;
        case 'c':
            if (o->n_corpus == MAX_CORPUS) {
                cli_error(C, "--corpus: at most %d paths", MAX_CORPUS);
                return -1;
            }
            o->corpus[o->n_corpus++] = optarg;
            break;
        case 'o':
            o->out_dir = optarg;
            break;
        case 'k':
            o->tokenizer = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            return 1;
        default:
            cli_unknown_flag(C, argc, argv);
            return -1;
        }
        if (bad) return -1;
    }
    if (cli_no_extra_args(C, argc, argv)) return -1;
    if (!any_task) {
        cli_error(C, "--task: required (passkey, niah_multikey, variable_tracking, "
                     "kv_retrieval or all)");
        return -1;
    }
    if (!o->n_lengths) {
        cli_error(C, "--length: required (target tokens, >= 256)");
        return -1;
    }
    if (!o->out_dir || !*o->out_dir) {
        cli_error(C, "--out-dir: %s (the directory for the JSONL files)",
                  o->out_dir ? "an empty path" : "required");
        return -1;
    }
    return 0;
}

static void print_stats(const struct synth_corpus *corpus)
{
    struct synth_corpus_stats st;
    synth_corpus_stats(corpus, &st);
    fprintf(stderr,
            "pulse synth: corpus: %zu files seen, %zu used, skipped %zu compressed (no zlib), "
            "%zu by extension, %zu binary; %.1f MiB read; %zu sentences (%.1f MiB), %zu "
            "duplicates dropped\n",
            st.files_seen, st.files_used, st.files_compressed, st.files_other, st.files_binary,
            (double)st.bytes_read / 1048576.0, st.sentences, (double)st.text_bytes / 1048576.0,
            st.duplicates);
}

/* Writes one task at one length; an exit code. */
/* Tokens of text under the model's tokenizer (BOS included, as the accuracy driver encodes). */
struct counter {
    struct tokenizer *tok;
    int32_t *ids;
    size_t cap;
};

static long long count_tokens(void *user, const char *text, size_t len)
{
    struct counter *c = user;
    size_t need = len + 16, n = 0; /* a token covers at least one byte (BOS aside) */
    if (need > c->cap) {
        free(c->ids);
        c->ids = malloc(sizeof(int32_t) * need);
        c->cap = c->ids ? need : 0;
        if (!c->ids) return -1;
    }
    return tokenizer_encode(c->tok, text, len, 1, c->ids, c->cap, &n) == PULSE_OK ? (long long)n
                                                                                  : -1;
}

static int write_one(const struct synth_opts *o, const struct synth_corpus *corpus, int task,
                     long length, struct counter *ctr)
{
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/%s_%ld.jsonl", o->out_dir, synth_task_name(task), length);
    struct synth_params p = {(enum synth_task)task,          length, (size_t)o->samples, o->seed,
                             ctr->tok ? count_tokens : NULL, ctr};
    FILE *f = fopen(path, "w");
    if (!f) {
        cli_error("synth", "--out-dir: %s: cannot write: %s", path, strerror(errno));
        return 1;
    }
    double tok[3];
    int rc = synth_write_jsonl(corpus, &p, f, tok, err, sizeof err);
    if (fclose(f) != 0 && rc == PULSE_OK) {
        snprintf(err, sizeof err, "close failed: %s", strerror(errno));
        rc = PULSE_ERR_IO;
    }
    if (rc != PULSE_OK) {
        remove(path);
        cli_error("synth", "%s: %s", path, err);
        return rc == PULSE_ERR_INVALID ? EXIT_USAGE : rc == PULSE_ERR_NOMEM ? EXIT_OOM : 1;
    }
    fprintf(stderr,
            "pulse synth: wrote %s: %ld samples, prompt tokens min %.0f mean %.1f max %.0f\n", path,
            o->samples, tok[0], tok[1], tok[2]);
    return 0;
}

int cmd_synth(int argc, char **argv)
{
    struct synth_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc > 0 ? 0 : EXIT_USAGE;
    size_t n_paths = (size_t)o.n_corpus;
    const char *const *paths = o.corpus;
    if (!n_paths) paths = synth_corpus_default_paths(&n_paths);
    struct synth_corpus *corpus = NULL;
    char err[512];
    struct counter ctr = {NULL, NULL, 0};
    if (o.tokenizer) { /* before the corpus: a bad path fails at once */
        struct gguf_file *g;
        if (gguf_open(o.tokenizer, &g, err, sizeof err) != PULSE_OK ||
            (tokenizer_load(g, &ctr.tok, err, sizeof err) != PULSE_OK && (gguf_free(g), 1))) {
            cli_error("synth", "--tokenizer: %s", err);
            return EXIT_USAGE;
        }
        gguf_free(g);
    }
    int lrc = synth_corpus_load(paths, n_paths, &corpus, err, sizeof err);
    if (lrc != PULSE_OK) {
        cli_error("synth", "--corpus: %s", err);
        tokenizer_free(ctr.tok);
        return lrc == PULSE_ERR_NOMEM ? EXIT_OOM : EXIT_USAGE;
    }
    print_stats(corpus);
    if (mkdir(o.out_dir, 0777) != 0 && errno != EEXIST) {
        cli_error("synth", "--out-dir: %s: cannot create: %s", o.out_dir, strerror(errno));
        synth_corpus_free(corpus);
        tokenizer_free(ctr.tok);
        return 1;
    }
    for (int t = 0; t < SYNTH_TASK_COUNT && !rc; t++)
        for (int l = 0; o.tasks[t] && l < o.n_lengths && !rc; l++)
            rc = write_one(&o, corpus, t, o.lengths[l], &ctr);
    synth_corpus_free(corpus);
    tokenizer_free(ctr.tok);
    free(ctr.ids);
    return rc;
}
