/* The runtime's shared options (runtime_opts.h): the table and what reads it. */
#include "runtime_opts.h"

#include <getopt.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "kernels.h"
#include "kernels_cpu.h"

/* A word a value may be given as (and is written as in the JSON). */
struct rt_word {
    const char *word;
    long value;
};

static const struct rt_word on_off[] = {{"on", 1}, {"off", 0}, {NULL, 0}};
static const struct rt_word off_on[] = {{"on", 0}, {"off", 1}, {NULL, 0}}; /* a no_ field */
static const struct rt_word pin_words[] = {
    {"alloc", MEM_PIN_ALLOC}, {"register", MEM_PIN_REGISTER}, {NULL, 0}};
static const struct rt_word numa_words[] = {{"nearest", MEM_NUMA_NEAREST}, {"none", -1}, {NULL, 0}};
static const struct rt_word wait_words[] = {{"device", 0}, {"host", 1}, {NULL, 0}};
static const struct rt_word desc_words[] = {{"device", 0}, {"host", 1}, {NULL, 0}};
static const struct rt_word timing_words[] = {{"graph", 0}, {"stream", 1}, {NULL, 0}};
static const struct rt_word bytes_words[] = {{"source", 0}, {"profile", 1}, {NULL, 0}};
static const struct rt_word fill_words[] = {{"device", 0}, {"host", 1}, {NULL, 0}};
static const struct rt_word attend_words[] = {{"corrections", OFFLOAD_ATTEND_CORRECTIONS},
                                              {"on", OFFLOAD_ATTEND_ON},
                                              {"off", OFFLOAD_ATTEND_OFF},
                                              {NULL, 0}};
static const struct rt_word fork_words[] = {{"fork", 1}, {"inline", 0}, {NULL, 0}};
static const struct rt_word joint_words[] = {{"joint", 1}, {"apart", 0}, {NULL, 0}};
static const struct rt_word fused_words[] = {{"fused", 1}, {"apart", 0}, {NULL, 0}};
static const struct rt_word corr_words[] = {{"own", 1}, {"gather", 0}, {NULL, 0}};
static const struct rt_word gemm_words[] = {{"lt", ENGINE_GEMM_LT},
                                            {"lt-heuristic", ENGINE_GEMM_LT_HEURISTIC},
                                            {"cublas", ENGINE_GEMM_CUBLAS},
                                            {"skinny", ENGINE_GEMM_SKINNY},
                                            {NULL, 0}};

/* One option: --name takes an integer in [lo, hi] (none when lo > hi) or one of words; the
 * field (an int, or a size_t holding value << shift) at `off` in its group's struct. */
struct rt_opt {
    const char *name;
    int group;
    size_t off, size;
    long lo, hi;
    const struct rt_word *words;
    int shift;
    const char *env; /* the environment variable it replaces (NULL: none) */
    const char *help;
    const char *env_map; /* the variable's values as the option's words ("0=off,1=on"), for
                            the message that refuses it; NULL: the same value */
};

#define FIELD(type, f) offsetof(struct type, f), sizeof(((struct type *)0)->f)
#define NUMBER(lo, hi) lo, hi, NULL
#define WORDS(w) 1, 0, w

static const struct rt_opt table[] = {
    {"gs-threads", RT_RECALL, FIELD(recall_params, gather_threads), NUMBER(1, 256), 0,
     "PULSE_GATHER_THREADS", "gather-scatter: the CPU threads that gather", NULL},
    {"gs-piece-kb", RT_RECALL, FIELD(recall_params, piece_bytes), NUMBER(1, 1 << 20), 10,
     "PULSE_GS_PIECE_KB", "gather-scatter: the largest piece of one DMA, in KB", NULL},
    {"gs-stages", RT_RECALL, FIELD(recall_params, n_stage), NUMBER(2, 64), 0, "PULSE_GS_STAGES",
     "gather-scatter: staging buffers", NULL},
    {"gs-nt-stores", RT_RECALL, FIELD(recall_params, nt_stores), WORDS(on_off), 0,
     "PULSE_GS_NT_STORES", "gather-scatter: streaming stores into the staging buffer",
     "0=off,1=on"},
    {"zc-blocks", RT_RECALL, FIELD(recall_params, zc_blocks), NUMBER(1, 65535), 0,
     "PULSE_ZC_BLOCKS", "zero-copy: the gather's grid, blocks of 512 threads", NULL},
    {"zc-inflight-kb", RT_RECALL, FIELD(recall_params, zc_inflight_kb),
     NUMBER(1, RECALL_ZC_INFLIGHT_KB_MAX), 0, "PULSE_ZC_INFLIGHT_KB",
     "zero-copy: the KB each gather block keeps in flight", NULL},
    {"zc-desc", RT_RECALL, FIELD(recall_params, zc_desc_host), WORDS(desc_words), 0, NULL,
     "zero-copy: the gather reads its descriptors from device memory (copied ahead of it) or "
     "from the pinned host ring",
     NULL},
    {"recall-spin-us", RT_RECALL, FIELD(recall_params, spin_us), NUMBER(0, 1000000), 0,
     "PULSE_RECALL_SPIN_US", "how long the engine's threads spin before they sleep, us", NULL},
    {"recall-prime", RT_RECALL, FIELD(recall_params, prime), WORDS(on_off), 0, "PULSE_RECALL_PRIME",
     "the planner wakes the engine's threads while it plans a layer", "0=off,1=on"},
    {"pin", RT_PIN, FIELD(mem_pin_params, strategy), WORDS(pin_words), 0, "PULSE_PIN",
     "how the host pool is pinned: one cudaHostAlloc, or registered in pieces", NULL},
    {"pin-piece-mb", RT_PIN, FIELD(mem_pin_params, piece_bytes), NUMBER(2, 1 << 20), 20,
     "PULSE_PIN_PIECE_MB", "register: MB per registration", NULL},
    {"pin-threads", RT_PIN, FIELD(mem_pin_params, threads), NUMBER(1, 256), 0, "PULSE_PIN_THREADS",
     "register: threads that touch and register", NULL},
    {"pin-hugepages", RT_PIN, FIELD(mem_pin_params, hugepages), WORDS(on_off), 0,
     "PULSE_PIN_HUGEPAGES", "register: transparent huge pages asked for", "0=off,1=on"},
    {"pin-numa", RT_PIN, FIELD(mem_pin_params, numa_node), -1, 4095, numa_words, 0,
     "PULSE_PIN_NUMA", "register: the NUMA node of the pool's pages (nearest: the GPU's)",
     "-1=none"},
    {"cpu-threads", RT_ENGINE, FIELD(engine_params, cpu_threads),
     NUMBER(1, KERNELS_CPU_MAX_THREADS), 0, "PULSE_CPU_THREADS",
     "the cpu kernels' thread pool (also the offload runtime's host work)", NULL},
    {"piece-graphs", RT_ENGINE, FIELD(engine_params, no_piece_graphs), WORDS(off_on), 0,
     "PULSE_PIECE_GRAPHS", "the device path's layer pieces replayed as CUDA graphs", "0=off,1=on"},
    {"attn-blocks-per-sm", RT_ENGINE, FIELD(engine_params, attn_blocks_per_sm),
     NUMBER(1, ATTN_BLOCKS_PER_SM_MAX), 0, "PULSE_ATTN_BLOCKS_PER_SM",
     "CUDA attention: the split target, blocks per SM", NULL},
    {"attn-min-tiles", RT_ENGINE, FIELD(engine_params, attn_min_tiles),
     NUMBER(ATTN_MIN_TILES_LO, ATTN_MIN_TILES_HI), 0, "PULSE_ATTN_MIN_TILES",
     "CUDA attention: the least 16-token tiles of a split", NULL},
    {"gemm", RT_ENGINE, FIELD(engine_params, gemm), WORDS(gemm_words), 0, NULL,
     "cuda GEMMs: cuBLASLt's candidates timed per shape at warm-up, its heuristic's first, "
     "cublasGemmEx, or cuBLASLt's candidates and the suite's skinny kernel timed",
     NULL},
    {"pdl", RT_ENGINE, FIELD(engine_params, pdl), WORDS(on_off), 0, NULL,
     "cuda: the step's kernels launched with programmatic dependent launch (each launch hidden "
     "behind the kernel before it)",
     NULL},
    {"gemm-timing", RT_ENGINE, FIELD(engine_params, gemm_stream_timing), WORDS(timing_words), 0,
     NULL,
     "cuda GEMMs: cuBLASLt's candidates timed each inside a captured graph, as the step runs "
     "them, or as stream launches",
     NULL},
    {"gemm-sm-reserve", RT_ENGINE, FIELD(engine_params, gemm_sm_reserve), NUMBER(0, 1024), 0, NULL,
     "cuda GEMMs: SMs left to other kernels (the zero-copy gather); their SM count target is the "
     "device's less N",
     NULL},
    {"recall-wait", RT_OFFLOAD, FIELD(offload_params, host_wait), WORDS(wait_words), 0,
     "PULSE_DEVICE_WAIT",
     "cuda: the compute stream waits for a recall on the device, or the host waits",
     "0=host,1=device"},
    {"layer-graphs", RT_OFFLOAD, FIELD(offload_params, layer_graphs), WORDS(on_off), 0,
     "PULSE_LAYER_GRAPHS", "the device path's layers replayed as CUDA graphs", "0=off,1=on"},
    {"attend-recall", RT_OFFLOAD, FIELD(offload_params, attend_recall), WORDS(attend_words), 0,
     NULL,
     "zero-copy: a sparse layer selected at its own layer recalls its misses in its attention "
     "(read from the host pool and stored into their hot-cache slots) instead of a gather "
     "before it: a prefetching schedule's corrections only (where the device path runs), "
     "every such layer, or none",
     NULL},
    {"predict-stream", RT_OFFLOAD, FIELD(offload_params, predict_fork), WORDS(fork_words), 0, NULL,
     "zero-copy, a lookahead or prefetching schedule (--spec-from input): the selection of the "
     "layer ahead, with its hot-cache plan, on a stream of its own beside the layer's "
     "pre-attention and exact selection (measured slower), or on the compute stream",
     NULL},
    {"select-launch", RT_OFFLOAD, FIELD(offload_params, select_joint), WORDS(joint_words), 0, NULL,
     "a schedule that selects ahead: a layer's piece's two selections (PulseInfer's exact one "
     "and its prediction; the first layer's and the next) scored and ranked in one launch of "
     "each kernel, or one launch each",
     NULL},
    {"plan-launch", RT_OFFLOAD, FIELD(offload_params, plan_fused), WORDS(fused_words), 0, NULL,
     "zero-copy: a layer's hot-cache plan and its descriptors in one kernel, a piece's two "
     "layers (the exact selection and the prediction) in one launch, or the plan and the build "
     "as two kernels a layer",
     NULL},
    {"correction-stream", RT_OFFLOAD, FIELD(offload_params, correct_stream), WORDS(corr_words), 0,
     NULL,
     "zero-copy with a prefetching schedule (--spec-from input) whose corrections are gathered "
     "(not recalled in the attention: --attend-recall): a predicted layer's correction "
     "gathered on a stream of its own (after its plan and its prefetch), so the next layer's "
     "prefetch does not queue behind it, or on the gather's stream",
     NULL},
    {"prompt-kv-fill", RT_OFFLOAD, FIELD(offload_params, prompt_kv_host), WORDS(fill_words), 0,
     "PULSE_PROMPT_KV_HOST", "offload prompt KV written on the device (cuda) or by the CPU",
     "0=device,1=host"},
    {"run-ahead", RT_SERVE, FIELD(serve_params, run_ahead), WORDS(on_off), 0,
     "PULSE_SERVE_RUN_AHEAD", "the loop queues the next step before it reads a step's tokens",
     "0=off,1=on"},
    {"ioaa-refit", RT_SERVE, FIELD(serve_params, ioaa_refit), WORDS(on_off), 0, NULL,
     "pulseinfer: IOAA refits its recall terms from the measured steps", NULL},
    {"ioaa-bytes", RT_SERVE, FIELD(serve_params, ioaa_bytes), WORDS(bytes_words), 0, NULL,
     "pulseinfer --profile: IOAA's recall per request and layer, the run's query source's (its "
     "budget times its churn) or the profile's (measured on its own workload)",
     NULL},
};

#define N_OPTS ((int)PULSE_ARRAY_LEN(table))

/* The struct of opt's group inside o. */
static void *group_base(const struct runtime_opts *o, int group)
{
    struct runtime_opts *m = (struct runtime_opts *)o;
    switch (group) {
    case RT_RECALL:
        return &m->offload.recall;
    case RT_PIN:
        return &m->offload.pin;
    case RT_ENGINE:
        return &m->engine;
    case RT_OFFLOAD:
        return &m->offload;
    default:
        return &m->serve;
    }
}

static long field_get(const struct rt_opt *t, const void *base)
{
    const char *f = (const char *)base + t->off;
    if (t->size == sizeof(size_t) && t->size != sizeof(int)) {
        size_t v;
        memcpy(&v, f, sizeof v);
        return (long)(v >> t->shift);
    }
    int v;
    memcpy(&v, f, sizeof v);
    return (long)v;
}

static void field_set(const struct rt_opt *t, void *base, long v)
{
    char *f = (char *)base + t->off;
    if (t->size == sizeof(size_t) && t->size != sizeof(int)) {
        const size_t s = (size_t)v << t->shift;
        memcpy(f, &s, sizeof s);
        return;
    }
    const int i = (int)v;
    memcpy(f, &i, sizeof i);
}

void runtime_opts_init(struct runtime_opts *o)
{
    memset(o, 0, sizeof *o);
    o->engine.cpu_threads = kernels_cpu_default_threads();
    o->engine.attn_blocks_per_sm = ATTN_BLOCKS_PER_SM_MAX;
    o->engine.attn_min_tiles = ATTN_MIN_TILES;
    offload_params_init(&o->offload, 1, 1, 0);
    serve_params_init(&o->serve);
}

int runtime_opts_getopt(const struct option *own, int groups, struct option *out, int cap)
{
    int n = 0;
    for (; own[n].name; n++) {
        if (n >= cap - 1) return -1;
        out[n] = own[n];
    }
    for (int i = 0; i < N_OPTS; i++) {
        if (!(table[i].group & groups)) continue;
        if (n >= cap - 1) return -1;
        out[n++] = (struct option){table[i].name, required_argument, 0, RT_OPT_BASE + i};
    }
    out[n] = (struct option){0, 0, 0, 0};
    return 0;
}

int runtime_opts_code(int c)
{
    return c >= RT_OPT_BASE && c < RT_OPT_BASE + N_OPTS;
}

const char *runtime_opts_name(int c)
{
    return runtime_opts_code(c) ? table[c - RT_OPT_BASE].name : NULL;
}

int runtime_opts_group(int c)
{
    return runtime_opts_code(c) ? table[c - RT_OPT_BASE].group : 0;
}

int runtime_opts_count(int groups)
{
    int n = 0;
    for (int i = 0; i < N_OPTS; i++)
        n += (table[i].group & groups) != 0;
    return n;
}

/* "alloc or register", "N in [-1, 4095], nearest or none": what an option takes. */
static void takes(const struct rt_opt *t, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    if (t->lo <= t->hi)
        n += (size_t)snprintf(buf + n, len - n, "an integer in [%ld, %ld]%s", t->lo, t->hi,
                              t->words ? ", " : " (decimal)");
    for (int k = 0; t->words && t->words[k].word && n < len; k++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s",
                              k == 0                 ? ""
                              : t->words[k + 1].word ? ", "
                                                     : " or ",
                              t->words[k].word);
}

static int parse_one(const char *cmd, const struct rt_opt *t, void *base, const char *arg)
{
    for (int k = 0; t->words && t->words[k].word; k++)
        if (!strcmp(arg, t->words[k].word)) {
            field_set(t, base, t->words[k].value);
            return 0;
        }
    long v;
    if (t->lo <= t->hi && !cli_parse_long(arg, t->lo, t->hi, &v)) {
        field_set(t, base, v);
        return 0;
    }
    char what[160];
    takes(t, what, sizeof what);
    cli_error(cmd, "--%s: '%s' is not %s", t->name, arg, what);
    return -1;
}

int runtime_opts_flag(const char *cmd, struct runtime_opts *o, int c, const char *arg)
{
    if (!runtime_opts_code(c)) return -1;
    const struct rt_opt *t = &table[c - RT_OPT_BASE];
    return parse_one(cmd, t, group_base(o, t->group), arg);
}

int runtime_opts_set(const char *cmd, struct runtime_opts *o, int groups, const char *name,
                     const char *arg)
{
    if (!strncmp(name, "--", 2)) name += 2;
    for (int i = 0; i < N_OPTS; i++)
        if ((table[i].group & groups) && !strcmp(table[i].name, name))
            return runtime_opts_flag(cmd, o, RT_OPT_BASE + i, arg);
    return -2;
}

/* The value of t in o as its word (when it has one) or its number, into buf. */
static const char *value_text(const struct rt_opt *t, const struct runtime_opts *o, char *buf,
                              size_t len)
{
    const long v = field_get(t, group_base(o, t->group));
    for (int k = 0; t->words && t->words[k].word; k++)
        if (t->words[k].value == v) return t->words[k].word;
    snprintf(buf, len, "%ld", v);
    return buf;
}

/* "  FLAG  TEXT" in pulse's help layout: TEXT from column 25 (on the next line when FLAG is
 * longer), wrapped before column 96. */
static void help_line(FILE *f, const char *flag, const char *text)
{
    enum { COL = 25, WIDTH = 96 };
    int at = fprintf(f, "  %s", flag);
    if (at > COL - 1) {
        fputc('\n', f);
        at = 0;
    }
    fprintf(f, "%*s", COL - at, "");
    at = COL;
    for (const char *w = text; *w;) {
        const char *end = strchr(w, ' ');
        const int n = end ? (int)(end - w) : (int)strlen(w);
        if (at > COL && at + 1 + n > WIDTH) {
            fprintf(f, "\n%*s", COL, "");
            at = COL;
        } else if (at > COL) {
            fputc(' ', f);
            at++;
        }
        at += fprintf(f, "%.*s", n, w);
        w += n;
        while (*w == ' ')
            w++;
    }
    fputc('\n', f);
}

void runtime_opts_usage(FILE *f, int groups, const struct runtime_opts *o)
{
    static const struct {
        int group;
        const char *title;
    } titles[] = {{RT_RECALL, "recall engines"},
                  {RT_PIN, "host pool pinning"},
                  {RT_ENGINE, "engine"},
                  {RT_OFFLOAD, "offload runtime"},
                  {RT_SERVE, "serving loop"}};
    fputs("  runtime tuning (each run's values are in its config.options):\n", f);
    for (size_t g = 0; g < PULSE_ARRAY_LEN(titles); g++) {
        if (!(titles[g].group & groups)) continue;
        fprintf(f, "  %s:\n", titles[g].title);
        for (int i = 0; i < N_OPTS; i++) {
            const struct rt_opt *t = &table[i];
            if (t->group != titles[g].group) continue;
            char arg[64] = "", flag[96], dflt[32];
            if (t->lo <= t->hi) snprintf(arg, sizeof arg, "N");
            for (int k = 0; t->words && t->words[k].word; k++)
                snprintf(arg + strlen(arg), sizeof arg - strlen(arg), "%s%s", arg[0] ? "|" : "",
                         t->words[k].word);
            snprintf(flag, sizeof flag, "--%s %s", t->name, arg);
            char text[256];
            snprintf(text, sizeof text, "%s (default %s)", t->help,
                     value_text(t, o, dflt, sizeof dflt));
            help_line(f, flag, text);
        }
    }
}

json_t *runtime_opts_json(const struct runtime_opts *o, int groups)
{
    json_t *j = json_object();
    for (int i = 0; i < N_OPTS; i++) {
        const struct rt_opt *t = &table[i];
        if (!(t->group & groups)) continue;
        char key[64], buf[32];
        snprintf(key, sizeof key, "%s", t->name);
        for (char *c = key; *c; c++)
            if (*c == '-') *c = '_';
        const char *text = value_text(t, o, buf, sizeof buf);
        json_object_set_new(j, key,
                            text == buf ? json_integer(field_get(t, group_base(o, t->group)))
                                        : json_string(text));
    }
    return j;
}

/* The table's fields of `group` from o into dst (that group's struct). */
static void copy_group(const struct runtime_opts *o, int group, void *dst)
{
    const char *src = group_base(o, group);
    for (int i = 0; i < N_OPTS; i++)
        if (table[i].group == group)
            memcpy((char *)dst + table[i].off, src + table[i].off, table[i].size);
}

void runtime_opts_engine(const struct runtime_opts *o, struct engine_params *p)
{
    copy_group(o, RT_ENGINE, p);
}

void runtime_opts_offload(const struct runtime_opts *o, struct offload_params *p)
{
    copy_group(o, RT_OFFLOAD, p);
    copy_group(o, RT_RECALL, &p->recall);
    copy_group(o, RT_PIN, &p->pin);
}

void runtime_opts_serve(const struct runtime_opts *o, struct serve_params *p)
{
    copy_group(o, RT_SERVE, p);
}

/* An old variable's value v as the option's value (env_map, else v itself when the option
 * takes it), or NULL. */
static const char *old_value(const struct rt_opt *t, const char *v)
{
    static char word[32];
    const size_t n = strlen(v);
    for (const char *m = t->env_map; m && *m;) {
        const char *eq = strchr(m, '='), *comma = strchr(m, ',');
        if (!eq) break;
        const size_t wl = comma ? (size_t)(comma - eq - 1) : strlen(eq + 1);
        if ((size_t)(eq - m) == n && !strncmp(m, v, n) && wl < sizeof word) {
            memcpy(word, eq + 1, wl);
            word[wl] = 0;
            return word;
        }
        m = comma ? comma + 1 : "";
    }
    long x;
    for (int k = 0; t->words && t->words[k].word; k++)
        if (!strcmp(v, t->words[k].word)) return v;
    return t->lo <= t->hi && !cli_parse_long(v, t->lo, t->hi, &x) ? v : NULL;
}

int runtime_opts_refuse_env(void)
{
    for (int i = 0; i < N_OPTS; i++) {
        const char *v = table[i].env ? getenv(table[i].env) : NULL; /* NULL: replaces none */
        if (!v || !*v) continue;
        const char *as = old_value(&table[i], v);
        fprintf(stderr,
                "pulse: %s=%s: this variable is no longer read: give --%s%s%s on the command "
                "line instead (pulse run --help) and unset it\n",
                table[i].env, v, table[i].name, as ? " " : "", as ? as : "");
        return -1;
    }
    return 0;
}
