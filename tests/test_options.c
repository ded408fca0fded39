/* Configuration in one place (experiments/runtime_opts.h):
 *   the params structs' defaults (recall_params_init, mem_pin_params_default,
 *   offload_params_init, serve_params_init, the cpu kernels' pool) do not move when the
 *   environment variables they used to read are set;
 *   every option of the shared table parses what it takes, refuses what it does not (below and
 *   above its range, junk, a word it does not know), and its value reaches the field it names
 *   (through runtime_opts_engine / _offload / _serve) and config.options' JSON;
 *   a command's groups select its options (getopt array, count). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "experiments/runtime_opts.h"
#include "kernels.h"
#include "kernels_cpu.h"
#include "testutil.h"

/* Every variable that became an option, set to a valid value other than its default. */
static const char *const old_env[][2] = {
    {"PULSE_GATHER_THREADS", "7"},  {"PULSE_GS_PIECE_KB", "64"},
    {"PULSE_GS_STAGES", "9"},       {"PULSE_GS_NT_STORES", "0"},
    {"PULSE_ZC_BLOCKS", "32"},      {"PULSE_ZC_INFLIGHT_KB", "16"},
    {"PULSE_RECALL_SPIN_US", "5"},  {"PULSE_RECALL_PRIME", "1"},
    {"PULSE_PIN", "alloc"},         {"PULSE_PIN_PIECE_MB", "64"},
    {"PULSE_PIN_THREADS", "3"},     {"PULSE_PIN_HUGEPAGES", "0"},
    {"PULSE_PIN_NUMA", "1"},        {"PULSE_CPU_THREADS", "5"},
    {"PULSE_PIECE_GRAPHS", "0"},    {"PULSE_ATTN_BLOCKS_PER_SM", "4"},
    {"PULSE_ATTN_MIN_TILES", "64"}, {"PULSE_DEVICE_WAIT", "0"},
    {"PULSE_LAYER_GRAPHS", "0"},    {"PULSE_PROMPT_KV_HOST", "1"},
    {"PULSE_SERVE_RUN_AHEAD", "0"},
};

struct defaults {
    struct recall_params recall;
    struct mem_pin_params pin;
    struct offload_params offload;
    struct serve_params serve;
    int cpu_threads;
    struct runtime_opts rt;
};

static void make_defaults(struct defaults *d)
{
    memset(d, 0, sizeof *d);
    recall_params_init(&d->recall, RECALL_GATHER_SCATTER, 64);
    mem_pin_params_default(&d->pin);
    offload_params_init(&d->offload, 4, 1024, 7);
    serve_params_init(&d->serve);
    d->cpu_threads = kernels_cpu_default_threads();
    runtime_opts_init(&d->rt);
}

/* The *_params_init functions read no environment: with every old variable set, the same bytes. */
static void test_params_init_ignore_env(void)
{
    struct defaults a, b;
    make_defaults(&a);
    for (size_t i = 0; i < PULSE_ARRAY_LEN(old_env); i++)
        setenv(old_env[i][0], old_env[i][1], 1);
    make_defaults(&b);
    for (size_t i = 0; i < PULSE_ARRAY_LEN(old_env); i++)
        unsetenv(old_env[i][0]);
    EXPECT(!memcmp(&a.recall, &b.recall, sizeof a.recall));
    EXPECT(!memcmp(&a.pin, &b.pin, sizeof a.pin));
    EXPECT(!memcmp(&a.offload, &b.offload, sizeof a.offload));
    EXPECT(!memcmp(&a.serve, &b.serve, sizeof a.serve));
    EXPECT_EQ_INT(a.cpu_threads, b.cpu_threads);
    EXPECT(!memcmp(&a.rt, &b.rt, sizeof a.rt));
    /* the defaults themselves, as README documents them */
    EXPECT_EQ_INT(b.recall.zc_blocks, 4);
    EXPECT_EQ_INT(b.recall.zc_inflight_kb, RECALL_ZC_INFLIGHT_KB);
    EXPECT_EQ_INT(b.recall.piece_bytes, (size_t)2048 << 10);
    EXPECT_EQ_INT(b.recall.n_stage, 3);
    EXPECT_EQ_INT(b.recall.nt_stores, 1);
    EXPECT_EQ_INT(b.recall.spin_us, 200);
    EXPECT_EQ_INT(b.recall.prime, 0);
    EXPECT_EQ_INT(b.recall.gather_threads, recall_default_gather_threads());
    EXPECT_EQ_INT(b.pin.strategy, MEM_PIN_REGISTER);
    EXPECT_EQ_INT(b.pin.numa_node, MEM_NUMA_NEAREST);
    EXPECT_EQ_INT(b.pin.hugepages, 1);
    EXPECT_EQ_INT(b.offload.host_wait, 0);
    EXPECT_EQ_INT(b.offload.layer_graphs, 1);
    EXPECT_EQ_INT(b.offload.prompt_kv_host, 0);
    EXPECT_EQ_INT(b.offload.predict_fork, 0);
    EXPECT_EQ_INT(b.offload.select_joint, 1);
    EXPECT_EQ_INT(b.offload.plan_fused, 1);
    EXPECT_EQ_INT(b.offload.attend_recall, OFFLOAD_ATTEND_CORRECTIONS);
    EXPECT_EQ_INT(b.offload.correct_stream, 0);
    EXPECT(!memcmp(&b.offload.recall, &a.rt.offload.recall, sizeof b.offload.recall));
    EXPECT_EQ_INT(b.serve.run_ahead, 1);
    EXPECT_EQ_INT(b.serve.ioaa_refit, 1);
    EXPECT_EQ_INT(b.rt.engine.cpu_threads, kernels_cpu_default_threads());
    EXPECT_EQ_INT(b.rt.engine.attn_blocks_per_sm, ATTN_BLOCKS_PER_SM_MAX);
    EXPECT_EQ_INT(b.rt.engine.attn_min_tiles, ATTN_MIN_TILES);
    EXPECT_EQ_INT(b.rt.engine.gemm, ENGINE_GEMM_LT);
    EXPECT_EQ_INT(b.rt.engine.gemm_sm_reserve, 0);
    EXPECT_EQ_INT(b.rt.engine.pdl, 0);
    EXPECT_EQ_INT(b.rt.engine.gemm_stream_timing, 0);
}

/* One option: a value it takes and what it sets (the JSON shows `json`, an integer when
 * json_int is set, else the word), and values it refuses. */
struct opt_case {
    const char *name;
    int group;
    const char *good;
    long long json_int; /* -1: a word */
    const char *json_word;
    const char *bad[4];
};

static const struct opt_case cases[] = {
    {"gs-threads", RT_RECALL, "256", 256, NULL, {"0", "257", "x", "-1"}},
    {"gs-piece-kb", RT_RECALL, "1", 1, NULL, {"0", "1048577", "2M", ""}},
    {"gs-stages", RT_RECALL, "64", 64, NULL, {"1", "65", "3.0", " 3"}},
    {"gs-nt-stores", RT_RECALL, "off", -1, "off", {"0", "1", "no", "ON"}},
    {"zc-blocks", RT_RECALL, "65535", 65535, NULL, {"0", "65536", "0x10", "+8"}},
    {"zc-inflight-kb", RT_RECALL, "1", 1, NULL, {"0", "257", "128K", "-128"}},
    {"zc-desc", RT_RECALL, "device", -1, "device", {"0", "1", "mapped", ""}},
    {"recall-spin-us", RT_RECALL, "0", 0, NULL, {"-1", "1000001", "1e3", "us"}},
    {"recall-prime", RT_RECALL, "on", -1, "on", {"1", "yes", "", "true"}},
    {"pin", RT_PIN, "alloc", -1, "alloc", {"0", "Alloc", "mmap", ""}},
    {"pin-piece-mb", RT_PIN, "2", 2, NULL, {"1", "1048577", "1G", "x"}},
    {"pin-threads", RT_PIN, "256", 256, NULL, {"0", "257", "all", "-3"}},
    {"pin-hugepages", RT_PIN, "off", -1, "off", {"0", "never", "", "OFF"}},
    {"pin-numa", RT_PIN, "none", -1, "none", {"-2", "4096", "near", "0.5"}},
    {"cpu-threads", RT_ENGINE, "64", 64, NULL, {"0", "65", "many", "-1"}},
    {"piece-graphs", RT_ENGINE, "off", -1, "off", {"0", "false", "", "no"}},
    {"attn-blocks-per-sm", RT_ENGINE, "1", 1, NULL, {"0", "17", "x", "-16"}},
    {"attn-min-tiles", RT_ENGINE, "4096", 4096, NULL, {"3", "4097", "16t", "0"}},
    {"gemm", RT_ENGINE, "skinny", -1, "skinny", {"0", "LT", "blas", ""}},
    {"pdl", RT_ENGINE, "on", -1, "on", {"0", "1", "no", ""}},
    {"gemm-timing", RT_ENGINE, "stream", -1, "stream", {"0", "1", "Graph", ""}},
    {"gemm-sm-reserve", RT_ENGINE, "16", 16, NULL, {"-1", "1025", "8.0", "x"}},
    {"recall-wait", RT_OFFLOAD, "host", -1, "host", {"0", "1", "gpu", ""}},
    {"layer-graphs", RT_OFFLOAD, "off", -1, "off", {"0", "1", "none", ""}},
    {"attend-recall", RT_OFFLOAD, "on", -1, "on", {"0", "1", "yes", ""}},
    {"predict-stream", RT_OFFLOAD, "fork", -1, "fork", {"0", "1", "Fork", ""}},
    {"select-launch", RT_OFFLOAD, "apart", -1, "apart", {"0", "1", "Joint", ""}},
    {"plan-launch", RT_OFFLOAD, "apart", -1, "apart", {"0", "1", "Fused", ""}},
    {"correction-stream", RT_OFFLOAD, "own", -1, "own", {"0", "1", "side", ""}},
    {"prompt-kv-fill", RT_OFFLOAD, "host", -1, "host", {"cpu", "1", "", "Host"}},
    {"run-ahead", RT_SERVE, "off", -1, "off", {"0", "1", "never", ""}},
    {"ioaa-refit", RT_SERVE, "off", -1, "off", {"0", "yes", "none", ""}},
    {"ioaa-bytes", RT_SERVE, "profile", -1, "profile", {"0", "1", "run", ""}},
};

/* The JSON key of an option: its name with '_' for '-'. */
static void key_of(const char *name, char *key, size_t len)
{
    snprintf(key, len, "%s", name);
    for (char *c = key; *c; c++)
        if (*c == '-') *c = '_';
}

static void test_each_option(void)
{
    EXPECT_EQ_INT(runtime_opts_count(RT_ALL), (int)PULSE_ARRAY_LEN(cases)); /* none untested */
    for (size_t i = 0; i < PULSE_ARRAY_LEN(cases); i++) {
        const struct opt_case *c = &cases[i];
        struct runtime_opts o, def;
        runtime_opts_init(&o);
        runtime_opts_init(&def);
        char key[64];
        key_of(c->name, key, sizeof key);
        /* not in another group */
        EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL & ~c->group, c->name, c->good), -2);
        for (int k = 0; k < 4; k++) { /* refused, and nothing changed */
            EXPECT_EQ_INT(runtime_opts_set("test", &o, c->group, c->name, c->bad[k]), -1);
            EXPECT(!memcmp(&o, &def, sizeof o));
        }
        EXPECT_EQ_INT(runtime_opts_set("test", &o, c->group, c->name, c->good), 0);
        EXPECT(memcmp(&o, &def, sizeof o) != 0); /* the good value is not the default */
        json_t *j = runtime_opts_json(&o, RT_ALL), *jd = runtime_opts_json(&def, RT_ALL);
        json_t *v = json_object_get(j, key);
        if (c->json_int >= 0)
            EXPECT_EQ_INT(json_integer_value(v), c->json_int);
        else
            EXPECT_STR_EQ(json_string_value(v), c->json_word);
        EXPECT(!json_equal(v, json_object_get(jd, key)));
        EXPECT_EQ_INT(json_object_size(j), PULSE_ARRAY_LEN(cases));
        /* only this option differs from the defaults' JSON */
        const char *k2;
        json_t *v2;
        int differ = 0;
        json_object_foreach(j, k2, v2) differ += !json_equal(v2, json_object_get(jd, k2));
        EXPECT_EQ_INT(differ, 1);
        json_decref(j);
        json_decref(jd);
        /* it reaches the params a command builds, and nothing else moves */
        struct engine_params ep, ep0;
        memset(&ep, 0, sizeof ep);
        memset(&ep0, 0, sizeof ep0);
        runtime_opts_engine(&o, &ep);
        runtime_opts_engine(&def, &ep0);
        struct offload_params op, op0;
        offload_params_init(&op, 2, 100, 1);
        offload_params_init(&op0, 2, 100, 1);
        runtime_opts_offload(&o, &op);
        runtime_opts_offload(&def, &op0);
        struct serve_params sp, sp0;
        serve_params_init(&sp);
        serve_params_init(&sp0);
        runtime_opts_serve(&o, &sp);
        runtime_opts_serve(&def, &sp0);
        const int moved = (memcmp(&ep, &ep0, sizeof ep) != 0) +
                          (memcmp(&op, &op0, sizeof op) != 0) + (memcmp(&sp, &sp0, sizeof sp) != 0);
        EXPECT_EQ_INT(moved, 1);
        EXPECT_EQ_INT(memcmp(&ep, &ep0, sizeof ep) != 0, c->group == RT_ENGINE);
        EXPECT_EQ_INT(memcmp(&sp, &sp0, sizeof sp) != 0, c->group == RT_SERVE);
        /* the offload runtime's params equal to their defaults but the field's */
        EXPECT_EQ_INT(memcmp(&op0, &op, sizeof op) != 0,
                      c->group == RT_RECALL || c->group == RT_PIN || c->group == RT_OFFLOAD);
    }
    /* a few fields by name */
    struct runtime_opts o;
    runtime_opts_init(&o);
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--zc-blocks", "8"), 0);
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--gs-piece-kb", "256"), 0);
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--pin-piece-mb", "64"), 0);
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--pin-numa", "3"), 0);
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--piece-graphs", "off"), 0);
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--recall-wait", "host"), 0);
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--run-ahead", "off"), 0);
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--ioaa-refit", "off"), 0);
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--gemm", "lt-heuristic"), 0);
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--gemm-sm-reserve", "8"), 0);
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--pdl", "on"), 0);
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--gemm-timing", "stream"), 0);
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--attend-recall", "off"), 0);
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--no-such-option", "1"), -2);
    struct offload_params op;
    offload_params_init(&op, 1, 1, 1);
    runtime_opts_offload(&o, &op);
    EXPECT_EQ_INT(op.recall.zc_blocks, 8);
    EXPECT_EQ_INT(op.recall.piece_bytes, (size_t)256 << 10);
    EXPECT_EQ_INT(op.pin.piece_bytes, (size_t)64 << 20);
    EXPECT_EQ_INT(op.pin.numa_node, 3);
    EXPECT_EQ_INT(op.host_wait, 1);
    EXPECT_EQ_INT(op.attend_recall, OFFLOAD_ATTEND_OFF);
    /* and back to the default's word */
    EXPECT_EQ_INT(runtime_opts_set("test", &o, RT_ALL, "--attend-recall", "corrections"), 0);
    runtime_opts_offload(&o, &op);
    EXPECT_EQ_INT(op.attend_recall, OFFLOAD_ATTEND_CORRECTIONS);
    struct engine_params ep;
    memset(&ep, 0, sizeof ep);
    runtime_opts_engine(&o, &ep);
    EXPECT_EQ_INT(ep.no_piece_graphs, 1);
    EXPECT_EQ_INT(ep.gemm, ENGINE_GEMM_LT_HEURISTIC);
    EXPECT_EQ_INT(ep.gemm_sm_reserve, 8);
    EXPECT_EQ_INT(ep.pdl, 1);
    EXPECT_EQ_INT(ep.gemm_stream_timing, 1);
    struct serve_params sp;
    serve_params_init(&sp);
    runtime_opts_serve(&o, &sp);
    EXPECT_EQ_INT(sp.run_ahead, 0);
    EXPECT_EQ_INT(sp.ioaa_refit, 0);
    json_t *j = runtime_opts_json(&o, RT_PIN);
    EXPECT_EQ_INT(json_integer_value(json_object_get(j, "pin_numa")), 3);
    EXPECT_EQ_INT(json_integer_value(json_object_get(j, "pin_piece_mb")), 64);
    EXPECT(json_object_get(j, "zc_blocks") == NULL);
    json_decref(j);
}

/* A command's groups: its own options first, then the table's, nothing else. */
static void test_getopt_groups(void)
{
    static const struct option own[] = {{"seed", required_argument, 0, 's'}, {0, 0, 0, 0}};
    struct option all[64];
    EXPECT_EQ_INT(runtime_opts_getopt(own, RT_RECALL | RT_PIN, all, 64), 0);
    int n = 0;
    while (all[n].name)
        n++;
    EXPECT_EQ_INT(n, 1 + runtime_opts_count(RT_RECALL | RT_PIN));
    EXPECT_STR_EQ(all[0].name, "seed");
    for (int i = 1; i < n; i++) {
        EXPECT(runtime_opts_code(all[i].val));
        EXPECT_EQ_INT(all[i].has_arg, required_argument);
        EXPECT(strcmp(all[i].name, "cpu-threads") != 0);
    }
    EXPECT_EQ_INT(runtime_opts_getopt(own, RT_ALL, all, 4), -1); /* no room */
    EXPECT(!runtime_opts_code('s'));
}

/* The old variables: none set, nothing refused; one set, refused. */
static void test_refuse_env(void)
{
    EXPECT_EQ_INT(runtime_opts_refuse_env(), 0);
    for (size_t i = 0; i < PULSE_ARRAY_LEN(old_env); i++) {
        setenv(old_env[i][0], old_env[i][1], 1);
        EXPECT_EQ_INT(runtime_opts_refuse_env(), -1);
        unsetenv(old_env[i][0]);
    }
    setenv("PULSE_ZC_BLOCKS", "", 1); /* set but empty: as unset */
    EXPECT_EQ_INT(runtime_opts_refuse_env(), 0);
    unsetenv("PULSE_ZC_BLOCKS");
}

int main(void)
{
    test_params_init_ignore_env();
    test_each_option();
    test_getopt_groups();
    test_refuse_env();
    return tu_finish("test_options");
}
