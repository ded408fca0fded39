/* pulse synth: writes RULER-style synthetic tasks as LongBench JSONL files (accuracy/synth.h),
 * one file per task and length: OUT_DIR/<task>_<length>.jsonl; or, with --format train, the
 * records a model is trained on (accuracy/synth_train.h), from the test or the train split. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "accuracy/chat.h"
#include "accuracy/gguf.h"
#include "accuracy/model_load.h"
#include "accuracy/synth.h"
#include "accuracy/synth_train.h"
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
    "  --seed S        seed, < 2^63 (default 1); the same seed, split and corpus give the\n"
    "                  same files\n"
    "  --split S       test (default: the evaluation sets) or train (training data: the seed\n"
    "                  with bit 63 set, so that no training sample comes from an evaluation\n"
    "                  sample's stream, whatever the seeds)\n"
    "  --format F      longbench (default) or train: one record a sample with the prompt as\n"
    "                  pulse accuracy builds it (answer opening included) and the completion\n"
    "                  the model should write (accuracy/synth_train.h)\n"
    "  --chat C        train format: the prompt's chat template, none (default), gemma or\n"
    "                  chatml\n"
    "  --text N        train format: also N natural-text records a length from the corpus,\n"
    "                  DIR/text_<length>.jsonl (then --task may be left out)\n"
    "  --corpus PATH   filler documents: a directory walked recursively or a file\n"
    "                  (repeatable; default /usr/share/doc and /usr/share/common-licenses)\n"
    "  --out-dir DIR   where the files go (created if missing; required)\n"
    "  --tokenizer F   count tokens with the tokenizer of F (with BOS): a model file .gguf, a\n"
    "                  Hugging Face tokenizer.json, or a checkpoint directory holding one\n"
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
    const char *tokenizer; /* a .gguf, tokenizer.json or checkpoint whose tokenizer counts */
    int train_split;       /* --split train: seeds with SYNTH_TRAIN_SEED set */
    int train_format;      /* --format train */
    int chat;              /* --chat: enum chat_template */
    long text;             /* --text: text records a length */
    int chat_given;
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
                                         {"split", required_argument, 0, 'S'},
                                         {"format", required_argument, 0, 'f'},
                                         {"chat", required_argument, 0, 'C'},
                                         {"text", required_argument, 0, 'x'},
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
            bad = cli_u64(C, "--seed", optarg, SYNTH_TRAIN_SEED - 1, &o->seed);
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
        case 'S':
            if ((bad = strcmp(optarg, "test") && strcmp(optarg, "train")))
                cli_error(C, "--split: '%s' is not test or train", optarg);
            o->train_split = !strcmp(optarg, "train");
            break;
        case 'f':
            if ((bad = strcmp(optarg, "longbench") && strcmp(optarg, "train")))
                cli_error(C, "--format: '%s' is not longbench or train", optarg);
            o->train_format = !strcmp(optarg, "train");
            break;
        case 'C':
            o->chat_given = 1;
            if ((bad = chat_template_parse(optarg, &o->chat) || o->chat < 0))
                cli_error(C, "--chat: '%s' is not none, gemma or chatml", optarg);
            break;
        case 'x':
            bad = cli_int(C, "--text", optarg, 1, 1000000, &o->text);
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
    if (!any_task && !o->text) {
        cli_error(C, "--task: required (passkey, niah_multikey, variable_tracking, "
                     "kv_retrieval or all)");
        return -1;
    }
    if (!o->train_format && (o->text || o->chat_given)) {
        cli_error(C, "%s: only with --format train", o->text ? "--text" : "--chat");
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

/* The records of one file in the train format: task records of task t (text records when t is
 * -1), each line through fputs; tok[3] gets min, mean and max tokens. */
static int write_train(const struct synth_opts *o, const struct synth_corpus *corpus, int t,
                       const struct synth_params *p, FILE *f, double tok[3], char *err,
                       size_t errlen)
{
    tok[0] = INFINITY, tok[1] = 0, tok[2] = -INFINITY;
    for (size_t i = 0; i < p->n_samples; i++) {
        struct synth_sample s;
        char *line = NULL;
        if (t < 0) {
            line = synth_text_record(corpus, p, i, &s.tokens, err, errlen);
            if (!line) return PULSE_ERR_INVALID;
        } else {
            int rc = synth_sample_generate(corpus, p, i, &s, err, errlen);
            if (rc != PULSE_OK) return rc;
            line = synth_train_record(&s, p, i, o->chat, err, errlen);
            const long long tokens = s.tokens;
            synth_sample_release(&s);
            if (!line) return PULSE_ERR_NOMEM;
            s.tokens = tokens;
        }
        tok[0] = fmin(tok[0], (double)s.tokens), tok[2] = fmax(tok[2], (double)s.tokens);
        tok[1] += (double)s.tokens / (double)p->n_samples;
        int bad = fputs(line, f) < 0 || fputc('\n', f) == EOF;
        free(line);
        if (bad) {
            snprintf(err, errlen, "write failed at record %zu", i);
            return PULSE_ERR_IO;
        }
    }
    return PULSE_OK;
}

/* Writes one task (text records when task is -1) at one length; an exit code. */
static int write_one(const struct synth_opts *o, const struct synth_corpus *corpus, int task,
                     long length, struct counter *ctr)
{
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/%s_%ld.jsonl", o->out_dir,
             task < 0 ? "text" : synth_task_name(task), length);
    const long n = task < 0 ? o->text : o->samples;
    struct synth_params p = {task < 0 ? SYNTH_PASSKEY : (enum synth_task)task,
                             length,
                             (size_t)n,
                             o->seed | (o->train_split ? SYNTH_TRAIN_SEED : 0),
                             ctr->tok ? count_tokens : NULL,
                             ctr,
                             0};
    if (o->train_format && o->chat != CHAT_NONE) { /* the turn markers around the prompt */
        char *empty = chat_apply((enum chat_template)o->chat, "");
        if (!empty) return EXIT_OOM;
        p.reserve_tokens =
            (ctr->tok ? count_tokens : synth_count_bytes4)(ctr, empty, strlen(empty));
        free(empty);
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        cli_error("synth", "--out-dir: %s: cannot write: %s", path, strerror(errno));
        return 1;
    }
    double tok[3];
    int rc = o->train_format ? write_train(o, corpus, task, &p, f, tok, err, sizeof err)
                             : synth_write_jsonl(corpus, &p, f, tok, err, sizeof err);
    if (fclose(f) != 0 && rc == PULSE_OK) {
        snprintf(err, sizeof err, "close failed: %s", strerror(errno));
        rc = PULSE_ERR_IO;
    }
    if (rc != PULSE_OK) {
        remove(path);
        cli_error("synth", "%s: %s", path, err);
        return rc == PULSE_ERR_INVALID ? EXIT_USAGE : rc == PULSE_ERR_NOMEM ? EXIT_OOM : 1;
    }
    fprintf(stderr, "pulse synth: wrote %s: %ld %s, %s tokens min %.0f mean %.1f max %.0f\n", path,
            n, o->train_format ? "records" : "samples", task < 0 ? "text" : "prompt", tok[0],
            tok[1], tok[2]);
    return 0;
}

/* The tokenizer of path: a GGUF's, a tokenizer.json, or a checkpoint directory's. */
static int load_tokenizer(const char *path, struct tokenizer **out, char *err, size_t errlen)
{
    if (!model_path_is_gguf(path)) {
        struct stat st;
        char p[4096];
        const int dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
        snprintf(p, sizeof p, dir ? "%s/tokenizer.json" : "%s", path);
        return tokenizer_load_json(p, out, err, errlen);
    }
    struct gguf_file *g;
    int rc = gguf_open(path, &g, err, errlen);
    if (rc != PULSE_OK) return rc;
    rc = tokenizer_load(g, out, err, errlen);
    gguf_free(g);
    return rc;
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
    if (o.tokenizer && load_tokenizer(o.tokenizer, &ctr.tok, err, sizeof err) != PULSE_OK) {
        cli_error("synth", "--tokenizer: %s", err); /* before the corpus: a bad path fails */
        return EXIT_USAGE;
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
    for (int t = o.text ? -1 : 0; t < SYNTH_TASK_COUNT && !rc; t++)
        for (int l = 0; (t < 0 || o.tasks[t]) && l < o.n_lengths && !rc; l++)
            rc = write_one(&o, corpus, t, o.lengths[l], &ctr);
    synth_corpus_free(corpus);
    tokenizer_free(ctr.tok);
    free(ctr.ids);
    return rc;
}
