/* The IOAA profile file (runtime/sched/ioaa_profile.h): the analytic profile on hand-computed
 * values, to_json -> file -> load giving back the same bits, the reader's messages for bad files,
 * its running maximum, and `pulse profile` on the CPU: a file the reader accepts, with positive
 * nondecreasing tables that ioaa_create takes, t_O from the dense approximation (the CPU's
 * default, --offload-approx) or from real offload steps (--offload-steps), each recorded. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "ioaa.h"
#include "ioaa_profile.h"
#include "results.h"
#include "testutil.h"

static char tmp_path[256];

/* tiny: one layer's weights are 256 + 512 * 256 (qkv) + 256 * 256 (o) + 256 + 3 * 512 * 256
 * (gate, up, down) + 2 * 64 (QK-norm) = 590464 bf16 parameters; its KV is 2 heads x 64 x K,V x
 * 2 bytes = 512 bytes per token and layer. */
#define TINY_W 1180928.0
#define TINY_K 512.0

static struct ioaa_analytic_params tiny_params(void)
{
    return (struct ioaa_analytic_params){.cfg = model_config_find("tiny"),
                                         .bw = {100.0, 10.0},
                                         .budget_tokens = 256,
                                         .recall_bytes = 1000,
                                         .backend = "cpu",
                                         .recall_engine = "per-block"};
}

static void test_analytic(void)
{
    char err[256];
    struct ioaa_analytic_params ap = tiny_params();
    struct ioaa_profile_data d = {0};
    EXPECT_EQ_INT(ioaa_profile_analytic(&ap, &d, err, sizeof err), PULSE_OK);
    const struct ioaa_profile *p = &d.prof;
    EXPECT_EQ_INT(model_layer_weight_bytes(ap.cfg), (long long)TINY_W);
    EXPECT_EQ_INT(p->n_layers, 4);
    EXPECT_EQ_INT(p->tn_nb, 7);
    EXPECT_EQ_INT(p->tn_nc, 8);
    EXPECT_EQ_INT(p->to_n, 7);
    EXPECT_EQ_INT(p->tr_n, 10);
    EXPECT_NEAR(p->tn_b[6], 64, 0);
    EXPECT_NEAR(p->tn_c[0], 1024, 0);
    EXPECT_NEAR(p->tn_c[7], 131072, 0);
    EXPECT_NEAR(p->tr_bytes[0], 4096, 0);
    EXPECT_NEAR(p->tr_bytes[9], 1073741824.0, 0);
    EXPECT_NEAR(p->tn[0], (TINY_W + 1024 * TINY_K) / 100e9, 1e-18);
    EXPECT_NEAR(p->tn[6 * 8 + 7], (TINY_W + 64 * 131072 * TINY_K) / 100e9, 1e-15);
    EXPECT_NEAR(p->tn[3 * 8 + 2], (TINY_W + 8 * 4096 * TINY_K) / 100e9, 1e-16);
    EXPECT_NEAR(p->to[3], (TINY_W + 8 * 256 * TINY_K) / 100e9, 1e-18);
    EXPECT_NEAR(p->tr[0], 4096 / 10e9, 1e-20);
    EXPECT_NEAR(p->recall_bytes, 1000, 0);
    EXPECT(!strcmp(d.info.source, "analytic"));
    EXPECT(!strcmp(d.info.model, "tiny"));
    EXPECT_STR_CONTAINS(d.info.note, "analytic");
    EXPECT_EQ_INT(strlen(d.info.date), 20);
    struct ioaa_params ip = {.profile = d.prof, .max_waiting = 4, .irq = 1};
    struct ioaa *a = ioaa_create(&ip, err, sizeof err);
    EXPECT(a != NULL);
    ioaa_free(a);
    /* a local layer reads its window: tiny-gemma3 has 4 local layers of 24 tokens of 6 */
    ap.cfg = model_config_find("tiny-gemma3");
    EXPECT_EQ_INT(ioaa_profile_analytic(&ap, &d, err, sizeof err), PULSE_OK);
    const double k3 = 512.0; /* 1 KV head x 128 x K,V x 2 bytes */
    EXPECT_NEAR(d.prof.tn[0],
                (model_layer_weight_bytes(ap.cfg) + k3 * (4 * 24 + 2 * 1024) / 6.0) / 100e9, 1e-18);
    /* bad params name the input */
    ap.bw.h2d_gbps = 0;
    EXPECT_EQ_INT(ioaa_profile_analytic(&ap, &d, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "H2D");
    EXPECT(d.mem == NULL);
    ap = tiny_params();
    ap.budget_tokens = 0;
    EXPECT_EQ_INT(ioaa_profile_analytic(&ap, &d, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "budget_tokens");
    ioaa_profile_data_free(&d);
}

/* Writes j to tmp_path (full precision) and loads it into d. */
static int load_json(const json_t *j, struct ioaa_profile_data *d, char *err, size_t errlen)
{
    char werr[256];
    if (results_write_exact(j, tmp_path, werr, sizeof werr) != PULSE_OK) {
        fprintf(stderr, "write %s: %s\n", tmp_path, werr);
        tu_failures++;
        return PULSE_ERR_IO;
    }
    return ioaa_profile_load(tmp_path, d, err, errlen);
}

/* j (not consumed) is refused by the reader, its message holding why. */
static void refused(const json_t *j, const char *why)
{
    char err[512];
    struct ioaa_profile_data d = {0};
    EXPECT_EQ_INT(load_json(j, &d, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, why);
    ioaa_profile_data_free(&d);
}

static int same_doubles(const double *a, const double *b, int n)
{
    return memcmp(a, b, sizeof *a * (size_t)n) == 0;
}

static void expect_same(const struct ioaa_profile_data *a, const struct ioaa_profile_data *b)
{
    const struct ioaa_profile *p = &a->prof, *q = &b->prof;
    EXPECT_EQ_INT(p->n_layers, q->n_layers);
    EXPECT_EQ_INT(p->tn_nb, q->tn_nb);
    EXPECT_EQ_INT(p->tn_nc, q->tn_nc);
    EXPECT_EQ_INT(p->to_n, q->to_n);
    EXPECT_EQ_INT(p->tr_n, q->tr_n);
    if (p->tn_nb != q->tn_nb || p->tn_nc != q->tn_nc || p->to_n != q->to_n || p->tr_n != q->tr_n)
        return;
    EXPECT(same_doubles(p->tn_b, q->tn_b, p->tn_nb));
    EXPECT(same_doubles(p->tn_c, q->tn_c, p->tn_nc));
    EXPECT(same_doubles(p->tn, q->tn, p->tn_nb * p->tn_nc));
    EXPECT(same_doubles(p->to_b, q->to_b, p->to_n));
    EXPECT(same_doubles(p->to, q->to, p->to_n));
    EXPECT(same_doubles(p->tr_bytes, q->tr_bytes, p->tr_n));
    EXPECT(same_doubles(p->tr, q->tr, p->tr_n));
    EXPECT(p->recall_bytes == q->recall_bytes);
    const struct ioaa_profile_info *x = &a->info, *y = &b->info;
    EXPECT(!strcmp(x->model, y->model) && !strcmp(x->backend, y->backend) &&
           !strcmp(x->recall_engine, y->recall_engine) && !strcmp(x->date, y->date) &&
           !strcmp(x->source, y->source) && !strcmp(x->note, y->note));
}

static void test_round_trip(void)
{
    char err[256];
    struct ioaa_analytic_params ap = tiny_params();
    ap.recall_bytes = 1000.0 / 3; /* a real that needs all 17 digits */
    struct ioaa_profile_data d = {0}, back = {0};
    EXPECT_EQ_INT(ioaa_profile_analytic(&ap, &d, err, sizeof err), PULSE_OK);
    d.tn_c[0] = 1000.5; /* a grid value that is not an integer */
    json_t *j = ioaa_profile_to_json(&d.prof, &d.info);
    EXPECT(!strcmp(json_string_value(json_object_get(j, "schema")), IOAA_PROFILE_SCHEMA));
    EXPECT(
        json_is_integer(json_array_get(json_object_get(json_object_get(j, "recall"), "bytes"), 0)));
    EXPECT_EQ_INT(load_json(j, &back, err, sizeof err), PULSE_OK);
    expect_same(&d, &back);
    EXPECT_EQ_INT(back.raised, 0);
    json_decref(j);
    /* a profile without a note reads back with none */
    d.info.note[0] = 0;
    j = ioaa_profile_to_json(&d.prof, &d.info);
    EXPECT(json_object_get(j, "note") == NULL);
    EXPECT_EQ_INT(load_json(j, &back, err, sizeof err), PULSE_OK);
    expect_same(&d, &back);
    /* the recall and the compute beside each other: absent reads as none (the defaults
     * apply); one factor, and a table with the compute's slowdown, read back as written */
    EXPECT(json_object_get(json_object_get(j, "recall"), "beside_compute") == NULL);
    EXPECT_EQ_INT(back.info.beside.n, 0);
    EXPECT_NEAR(ioaa_beside_rate(&back.info.beside, 1e6), IOAA_PROFILE_BESIDE_DEFAULT, 0);
    EXPECT_NEAR(back.prof.compute_beside, 0, 0);
    json_decref(j);
    d.info.beside = (struct ioaa_beside){.n = 1, .factor = {0.4375}};
    j = ioaa_profile_to_json(&d.prof, &d.info);
    EXPECT(json_is_number(json_object_get(json_object_get(j, "recall"), "beside_compute")));
    EXPECT_EQ_INT(load_json(j, &back, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(back.info.beside.n, 1);
    EXPECT_NEAR(ioaa_beside_rate(&back.info.beside, 5e7), 0.4375, 0);
    json_decref(j);
    d.info.beside = (struct ioaa_beside){
        .n = 3, .bytes = {262144, 4194304, 67108864}, .factor = {0.31, 0.55, 0.83}};
    d.prof.compute_beside = 1.17;
    j = ioaa_profile_to_json(&d.prof, &d.info);
    EXPECT_EQ_INT(load_json(j, &back, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(back.info.beside.n, 3);
    for (int i = 0; i < 3; i++) {
        EXPECT_NEAR(back.info.beside.bytes[i], d.info.beside.bytes[i], 0);
        EXPECT_NEAR(back.info.beside.factor[i], d.info.beside.factor[i], 0);
    }
    EXPECT_NEAR(back.prof.compute_beside, 1.17, 0);
    EXPECT_EQ_INT(back.info.beside.slow_n, 0);
    { /* the compute's slowdown as a table per round size: read back as written, its largest
       * the profile's one factor; refused with one point, a factor under 1, bytes not
       * increasing */
        struct ioaa_profile_data t = d;
        t.info.beside.slow_n = 3;
        const double sb[3] = {262144, 4194304, 16777216}, sv[3] = {1.08, 1.31, 1.64};
        memcpy(t.info.beside.slow_bytes, sb, sizeof sb), memcpy(t.info.beside.slow, sv, sizeof sv);
        json_t *tj = ioaa_profile_to_json(&t.prof, &t.info);
        json_t *gj = json_object_get(json_object_get(tj, "recall"), "compute_beside");
        EXPECT(json_is_object(gj));
        EXPECT_EQ_INT(load_json(tj, &back, err, sizeof err), PULSE_OK);
        EXPECT_EQ_INT(back.info.beside.slow_n, 3);
        for (int i = 0; i < 3; i++) {
            EXPECT_NEAR(back.info.beside.slow_bytes[i], sb[i], 0);
            EXPECT_NEAR(back.info.beside.slow[i], sv[i], 0);
        }
        EXPECT_NEAR(back.prof.compute_beside, 1.64, 0);
        json_array_set_new(json_object_get(gj, "factor"), 0, json_real(0.9));
        refused(tj, "recall.compute_beside: factor 0 is 0.9: expected [1, 8]");
        json_array_set_new(json_object_get(gj, "factor"), 0, json_real(1.08));
        json_array_set_new(json_object_get(gj, "bytes"), 1, json_real(262144));
        refused(tj, "recall.compute_beside: bytes 1 is 262144");
        json_object_set_new(json_object_get(tj, "recall"), "compute_beside",
                            json_pack("{s:[f], s:[f]}", "bytes", 1e6, "factor", 1.2));
        refused(tj, "of 2 .. 16 points each");
        json_decref(tj);
    }
    /* refused: a factor out of range, bytes not increasing, a compute under 1, a bad form */
    json_t *rec = json_object_get(j, "recall");
    json_t *bj = json_object_get(rec, "beside_compute");
    json_array_set_new(json_object_get(bj, "factor"), 1, json_real(2.5));
    refused(j, "factor 1 is 2.5");
    json_array_set_new(json_object_get(bj, "factor"), 1, json_real(0.5));
    json_array_set_new(json_object_get(bj, "bytes"), 2, json_real(4194304));
    refused(j, "bytes 2 is");
    json_array_set_new(json_object_get(bj, "bytes"), 2, json_real(67108864));
    json_object_set_new(rec, "compute_beside", json_real(0.9));
    refused(j, "recall.compute_beside: expected a number in [1, 8]");
    json_object_set_new(rec, "compute_beside", json_real(1.1));
    json_object_set_new(rec, "beside_compute", json_string("half"));
    refused(j, "recall.beside_compute: expected a number");
    json_decref(j);
    ioaa_profile_data_free(&d);
    ioaa_profile_data_free(&back);
}

/* The analytic profile's JSON, to be broken by the caller. */
static json_t *good_json(void)
{
    char err[256];
    struct ioaa_analytic_params ap = tiny_params();
    struct ioaa_profile_data d = {0};
    PULSE_CHECK(ioaa_profile_analytic(&ap, &d, err, sizeof err) == PULSE_OK, err);
    json_t *j = ioaa_profile_to_json(&d.prof, &d.info);
    ioaa_profile_data_free(&d);
    return j;
}

static json_t *table(json_t *j, const char *obj, const char *key)
{
    return json_object_get(json_object_get(j, obj), key);
}

/* Loads j (consumed) and expects the failure status and both message parts. */
static void expect_reject(json_t *j, int status, const char *what, const char *why)
{
    char err[512] = "";
    struct ioaa_profile_data d = {0};
    EXPECT_EQ_INT(load_json(j, &d, err, sizeof err), status);
    EXPECT_STR_CONTAINS(err, tmp_path); /* the file is named */
    EXPECT_STR_CONTAINS(err, what);
    EXPECT_STR_CONTAINS(err, why);
    EXPECT(d.mem == NULL && d.prof.tn == NULL); /* nothing is left behind */
    json_decref(j);
}

static void test_rejects(void)
{
    char err[512];
    struct ioaa_profile_data d = {0};
    /* a missing file; a file that is not JSON */
    EXPECT_EQ_INT(ioaa_profile_load("/nonexistent/ioaa.json", &d, err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "/nonexistent/ioaa.json: cannot open");
    FILE *f = fopen(tmp_path, "w");
    fputs("{\"schema\": ", f);
    fclose(f);
    EXPECT_EQ_INT(ioaa_profile_load(tmp_path, &d, err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "not JSON");
    /* a directory or a device: refused before reading, saying what it is */
    EXPECT_EQ_INT(ioaa_profile_load("/tmp", &d, err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "/tmp: is a directory, not a JSON file");
    EXPECT_EQ_INT(ioaa_profile_load("/dev/null", &d, err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "/dev/null: is not a regular file");

    json_t *j = good_json();
    json_object_set_new(j, "env", json_string("NVIDIA H200"));
    expect_reject(j, PULSE_ERR_INVALID, "env", "not an object");
    /* the device it was measured on: env.gpu, else env.device, else unsaid */
    const char *devs[][3] = {
        {"NVIDIA H200", "cuda", "NVIDIA H200"}, {NULL, "cpu", "cpu"}, {NULL, NULL, ""}};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(devs); i++) {
        j = good_json();
        json_t *env = json_object();
        if (devs[i][0]) json_object_set_new(env, "gpu", json_string(devs[i][0]));
        if (devs[i][1]) json_object_set_new(env, "device", json_string(devs[i][1]));
        json_object_set_new(j, "env", env);
        EXPECT_EQ_INT(load_json(j, &d, err, sizeof err), PULSE_OK);
        EXPECT_STR_EQ(d.info.device, devs[i][2]);
        ioaa_profile_data_free(&d);
        json_decref(j);
    }
    /* the ceilings measured with it, optional; a bad one is refused */
    j = good_json();
    json_t *meas = json_object();
    json_object_set_new(meas, "copy_bandwidth_GBps", json_real(4171.4));
    json_object_set_new(meas, "h2d_peak_GBps", json_real(55.1));
    json_object_set_new(j, "measurement", meas);
    EXPECT_EQ_INT(load_json(j, &d, err, sizeof err), PULSE_OK);
    EXPECT_NEAR(d.info.copy_gbps, 4171.4, 1e-9);
    EXPECT_NEAR(d.info.h2d_gbps, 55.1, 1e-9);
    /* carried to another device: layer times and recall rounds scaled, each by its factor */
    {
        const int ntn = d.prof.tn_nb * d.prof.tn_nc, nto = d.prof.to_n, ntr = d.prof.tr_n;
        double tn0 = d.tn[ntn - 1], to0 = d.to[nto - 1], tr0 = d.tr[ntr - 1];
        EXPECT_EQ_INT(ioaa_profile_data_scale(&d, 1.4, 0.5, err, sizeof err), PULSE_OK);
        EXPECT_NEAR(d.tn[ntn - 1], 1.4 * tn0, 1e-12 * tn0);
        EXPECT_NEAR(d.to[nto - 1], 1.4 * to0, 1e-12 * to0);
        EXPECT_NEAR(d.tr[ntr - 1], 0.5 * tr0, 1e-12 * tr0);
        tn0 = d.tn[0];
        EXPECT_EQ_INT(ioaa_profile_data_scale(&d, 0, 1, err, sizeof err), PULSE_ERR_INVALID);
        EXPECT_STR_CONTAINS(err, "expected both finite and > 0");
        EXPECT_EQ_INT(ioaa_profile_data_scale(&d, 1, NAN, err, sizeof err), PULSE_ERR_INVALID);
        EXPECT(d.tn[0] == tn0); /* unchanged by a refusal */
    }
    ioaa_profile_data_free(&d);
    json_decref(j);
    j = good_json();
    json_object_set_new(j, "measurement", json_pack("{s:s}", "copy_bandwidth_GBps", "fast"));
    expect_reject(j, PULSE_ERR_INVALID, "measurement.copy_bandwidth_GBps", "expected a number > 0");
    j = good_json();
    json_object_set_new(j, "env", json_pack("{s:i}", "gpu", 90));
    expect_reject(j, PULSE_ERR_INVALID, "env.gpu", "expected a name");
    j = good_json();
    json_object_set_new(j, "config", json_pack("{s:i}", "budget_tokens", 0));
    expect_reject(j, PULSE_ERR_INVALID, "config.budget_tokens", "expected an integer >= 1");
    j = good_json();
    json_object_set_new(json_object_get(j, "recall"), "beside_compute", json_real(0));
    expect_reject(j, PULSE_ERR_INVALID, "recall.beside_compute", "factor 0 is 0: expected (0, 2]");
    j = good_json();
    json_object_set_new(json_object_get(j, "recall"), "beside_compute", json_string("half"));
    expect_reject(j, PULSE_ERR_INVALID, "recall.beside_compute", "expected a number");
    j = good_json();
    json_object_set_new(j, "schema", json_string("pulse-ioaa-profile/0"));
    expect_reject(j, PULSE_ERR_INVALID, "schema", "pulse-ioaa-profile/1");
    /* a grid that does not increase */
    j = good_json();
    json_array_set_new(table(j, "normal", "context"), 1, json_integer(1024));
    expect_reject(j, PULSE_ERR_INVALID, "normal.context[1]", "strictly increasing");
    j = good_json();
    json_array_set_new(table(j, "recall", "bytes"), 3, json_integer(100));
    expect_reject(j, PULSE_ERR_INVALID, "recall.bytes[3]", "strictly increasing");
    /* negative and zero times; t_R may be 0 */
    j = good_json();
    json_array_set_new(table(j, "offload", "layer_s"), 2, json_real(-1e-3));
    expect_reject(j, PULSE_ERR_INVALID, "offload.layer_s[2]", "not a time > 0");
    j = good_json();
    json_array_set_new(json_array_get(table(j, "normal", "layer_s"), 4), 5, json_real(0));
    expect_reject(j, PULSE_ERR_INVALID, "normal.layer_s[4][5]", "not a time > 0");
    j = good_json();
    json_array_set_new(table(j, "recall", "round_s"), 1, json_real(-0.5));
    expect_reject(j, PULSE_ERR_INVALID, "recall.round_s[1]", "not a time >= 0");
    j = good_json();
    json_array_set_new(table(j, "recall", "round_s"), 0, json_real(0));
    EXPECT_EQ_INT(load_json(j, &d, err, sizeof err), PULSE_OK);
    json_decref(j);
    /* shapes */
    j = good_json();
    json_array_remove(json_array_get(table(j, "normal", "layer_s"), 1), 0);
    expect_reject(j, PULSE_ERR_INVALID, "normal.layer_s[1]", "7 values, expected 8");
    j = good_json();
    json_array_remove(table(j, "normal", "layer_s"), 6);
    expect_reject(j, PULSE_ERR_INVALID, "normal.layer_s", "6 rows, expected 7");
    j = good_json();
    json_array_append_new(table(j, "offload", "layer_s"), json_real(1));
    expect_reject(j, PULSE_ERR_INVALID, "offload.layer_s", "8 values, expected 7");
    j = good_json();
    json_array_clear(table(j, "recall", "bytes"));
    expect_reject(j, PULSE_ERR_INVALID, "recall.bytes", "0 values");
    j = good_json();
    json_array_set_new(table(j, "normal", "batch"), 0, json_string("one"));
    expect_reject(j, PULSE_ERR_INVALID, "normal.batch[0]", "not a number");
    /* header fields */
    j = good_json();
    json_object_del(j, "recall_bytes_per_request_layer");
    expect_reject(j, PULSE_ERR_INVALID, "recall_bytes_per_request_layer", "missing");
    j = good_json();
    json_object_set_new(j, "n_layers", json_integer(0));
    expect_reject(j, PULSE_ERR_INVALID, "n_layers", "1..");
    j = good_json();
    json_object_set_new(j, "source", json_string("guessed"));
    expect_reject(j, PULSE_ERR_INVALID, "source", "measured");
    j = good_json();
    json_object_del(j, "offload");
    expect_reject(j, PULSE_ERR_INVALID, "offload", "missing");
    ioaa_profile_data_free(&d);
}

/* Dips in every table are raised to the running maximum and counted. */
static void test_running_max(void)
{
    json_t *j = good_json();
    json_t *nm = json_object_get(j, "normal");
    json_object_set_new(nm, "batch", json_pack("[i,i,i]", 1, 4, 16));
    json_object_set_new(nm, "context", json_pack("[i,i,i]", 100, 1000, 10000));
    /* row-major prefix maximum: (1,1) 1.2 -> 2 (above), (2,0) 1.4 -> 1.5 (below in b),
     * (2,2) 4.5 -> 5 (left) */
    json_object_set_new(
        nm, "layer_s",
        json_pack("[[f,f,f],[f,f,f],[f,f,f]]", 1.0, 2.0, 3.0, 1.5, 1.2, 4.0, 1.4, 5.0, 4.5));
    json_object_set_new(json_object_get(j, "offload"), "layer_s",
                        json_pack("[f,f,f,f,f,f,f]", 1.0, 0.5, 2.0, 3.0, 4.0, 5.0, 6.0));
    json_t *rt = table(j, "recall", "round_s");
    json_array_set_new(rt, 0, json_real(0));
    json_array_set_new(rt, 2, json_real(json_real_value(json_array_get(rt, 1)) / 2));
    char err[256];
    struct ioaa_profile_data d = {0};
    EXPECT_EQ_INT(load_json(j, &d, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(d.raised, 5);
    const double want[9] = {1, 2, 3, 1.5, 2, 4, 1.5, 5, 5};
    EXPECT(same_doubles(d.tn, want, 9));
    EXPECT_NEAR(d.to[1], 1.0, 0);
    EXPECT_NEAR(d.tr[0], 0, 0);
    EXPECT(d.tr[2] == d.tr[1]);
    struct ioaa_params ip = {.profile = d.prof, .max_waiting = 2, .irq = 1};
    struct ioaa *a = ioaa_create(&ip, err, sizeof err);
    EXPECT(a != NULL);
    ioaa_free(a);
    /* the raised tables are monotone: a second pass raises nothing */
    EXPECT_EQ_INT(ioaa_profile_data_monotone(&d), 0);
    json_decref(j);
    ioaa_profile_data_free(&d);
}

/* A recall cap paces the rounds: t_R(x) becomes max(t_R(x), x / cap), by hand on three
 * points (1 MB in 10 us, 4 MB in 100 us, 16 MB in 1 ms against 20 GB/s: 50 us, 200 us,
 * 800 us), the other tables untouched. */
static void test_cap_recall(void)
{
    char err[256];
    struct ioaa_profile_data d = {0};
    EXPECT_EQ_INT(ioaa_profile_data_alloc(&d, 1, 1, 1, 3, err, sizeof err), PULSE_OK);
    d.tn_b[0] = 1, d.tn_c[0] = 1024, d.tn[0] = 2e-4, d.to_b[0] = 1, d.to[0] = 3e-4;
    const double bytes[3] = {1e6, 4e6, 16e6}, t[3] = {1e-5, 1e-4, 1e-3};
    for (int i = 0; i < 3; i++)
        d.tr_bytes[i] = bytes[i], d.tr[i] = t[i];
    EXPECT_EQ_INT(ioaa_profile_data_cap_recall(&d, 20e9), 2);
    EXPECT_NEAR(d.tr[0], 5e-5, 1e-15);
    EXPECT_NEAR(d.tr[1], 2e-4, 1e-15);
    EXPECT_NEAR(d.tr[2], 1e-3, 0);
    EXPECT_NEAR(d.tn[0], 2e-4, 0);
    EXPECT_NEAR(d.to[0], 3e-4, 0);
    EXPECT_EQ_INT(ioaa_profile_data_monotone(&d), 0);
    ioaa_profile_data_free(&d);
}

/* The recall and the compute beside each other (ioaa_overlap) by hand: a hidden recall, one
 * past the compute at half its rate, the compute's slowdown while a short recall runs beside it
 * and both slowed with the recall ending last; nothing on one side. The rate interpolated in the
 * round's bytes between a table's points, its end values outside, one point everywhere, the
 * default when there is none. */
static void test_overlap(void)
{
    EXPECT_NEAR(ioaa_overlap(1.0, 0.3, 0.5, 1), 1.0, 1e-15);
    EXPECT_NEAR(ioaa_overlap(1.0, 0.8, 0.5, 1), 1.3, 1e-15);    /* 0.5 of it beside, 0.3 after */
    EXPECT_NEAR(ioaa_overlap(1.0, 0.3, 0.5, 1.5), 1.2, 1e-15);  /* beside 0.6 of 1.5 */
    EXPECT_NEAR(ioaa_overlap(1.0, 0.9, 0.5, 1.5), 1.65, 1e-15); /* 0.75 beside, 0.15 after */
    EXPECT_NEAR(ioaa_overlap(1.0, 1.0, 1, 1), 1.0, 0);
    EXPECT_NEAR(ioaa_overlap(0, 0.7, 0.5, 2), 0.7, 0);
    EXPECT_NEAR(ioaa_overlap(0.4, 0, 0.5, 2), 0.4, 0);
    const struct ioaa_beside t = {.n = 2, .bytes = {1e6, 4e6}, .factor = {0.4, 0.8}};
    EXPECT_NEAR(ioaa_beside_rate(&t, 0.5e6), 0.4, 0);
    EXPECT_NEAR(ioaa_beside_rate(&t, 2.5e6), 0.6, 1e-15);
    EXPECT_NEAR(ioaa_beside_rate(&t, 9e6), 0.8, 0);
    const struct ioaa_beside one = {.n = 1, .factor = {0.7}}, none = {0};
    EXPECT_NEAR(ioaa_beside_rate(&one, 123), 0.7, 0);
    EXPECT_NEAR(ioaa_beside_rate(&none, 123), IOAA_PROFILE_BESIDE_DEFAULT, 0);
    char why[160];
    EXPECT_EQ_INT(ioaa_beside_check(&t, why, sizeof why), 0);
    const struct ioaa_beside back = {.n = 2, .bytes = {4e6, 1e6}, .factor = {0.4, 0.8}};
    EXPECT_EQ_INT(ioaa_beside_check(&back, why, sizeof why), -1);
    EXPECT_STR_CONTAINS(why, "bytes 1 is 1e+06");
}

/* test_speculate's unfolded profile (into d, zeroed first): L = 10, t_N 2 ms, t_O(b) = 1 ms +
 * b 0.1 ms, t_R(x) = x / 1e10 (10 GB/s), r 2 MB. */
static void fold_tables(struct ioaa_profile_data *d)
{
    char err[256];
    memset(d, 0, sizeof *d);
    EXPECT_EQ_INT(ioaa_profile_data_alloc(d, 2, 1, 2, 2, err, sizeof err), PULSE_OK);
    d->tn_b[0] = 1, d->tn_b[1] = 64, d->tn_c[0] = 4096, d->tn[0] = d->tn[1] = 2e-3;
    d->to_b[0] = 1, d->to_b[1] = 65, d->to[0] = 1.1e-3, d->to[1] = 7.5e-3;
    d->tr_bytes[0] = 1e3, d->tr_bytes[1] = 1e9, d->tr[0] = 1e-7, d->tr[1] = 1e-1;
    d->prof.n_layers = 10, d->prof.recall_bytes = 2e6;
}

/* Speculation folded into the recall table (ioaa_profile_data_speculate): on a linear profile
 * (t_R = x / 10 GB/s, t_O(b) = 1 ms + b 0.1 ms, t_N(b, c) = 2 ms) the step of the folded model,
 * at every batch of both kinds and with and without IRQ, is the speculation's step written out:
 * the layer's window w t_O and the prefetch t_R(P) beside each other (the prefetch at f of its
 * rate while the compute runs, the compute g times as long while the prefetch does), what that
 * adds past the window, then the corrections t_R(C): t_R' = t_R(C) + that; L (t_O + max(t_R',
 * t_N + (1 - 1 / g) t_R')) with a normal batch and IRQ (the normal layers slowed beside the
 * recall), L (t_O + t_R') + L t_N without; for a
 * prefetch alone (a perfect prediction), corrections alone and both, with f given (1, 0.4, or
 * a table of two sizes) or absent (the default, 0.5), g absent (1) or 1.3; nothing to move:
 * unchanged; bad input refused. */
static void test_speculate(void)
{
    char err[256];
    const double L = 10;
    static const double pc[3][2] = {{2e6, 0}, {0, 1.5e6}, {3.2e6, 0.6e6}};
    static const double fs[3] = {1, 0.4, 0}; /* 0: absent */
    for (int k = 0; k < 36; k++) { /* the window: the whole layer, and 0.6 of it; g 1 and 1.3 */
        const double P = pc[k % 3][0], C = pc[k % 3][1], fin = fs[k / 3 % 3];
        const double w = k / 9 % 2 ? 0.6 : 1, g = k >= 18 ? 1.3 : 1;
        const int table = k >= 18 && fin == 0.4; /* 0.3 at 1 MB to 0.5 at 100 MB */
        struct ioaa_profile_data d;
        fold_tables(&d);
        if (table)
            d.info.beside = (struct ioaa_beside){.n = 2, .bytes = {1e6, 1e8}, .factor = {0.3, 0.5}};
        else if (fin > 0)
            d.info.beside = (struct ioaa_beside){.n = 1, .factor = {fin}};
        d.prof.compute_beside = k >= 18 ? g : 0;
        EXPECT_EQ_INT(ioaa_profile_data_speculate(&d, P, C, w, 32, err, sizeof err), PULSE_OK);
        EXPECT_EQ_INT(d.prof.tr_n, 32);
        EXPECT_NEAR(d.prof.recall_bytes, P + C, 1e-6);
        EXPECT_EQ_INT(ioaa_profile_data_monotone(&d), 0);
        for (int irq = 0; irq < 2; irq++) {
            const struct ioaa_params ip = {.profile = d.prof, .irq = irq};
            struct ioaa *a = ioaa_create(&ip, err, sizeof err);
            EXPECT(a != NULL);
            for (int bo = 1; a && bo <= 32; bo += 7)
                for (int bn = 0; bn <= 4; bn += 4) {
                    const double tn = bn ? 2e-3 : 0, to = 1e-3 + bo * 1e-4, x = bo * P;
                    const double f = table     ? fmin(0.5, fmax(0.3, 0.3 + 0.2 * (x - 1e6) / 99e6))
                                     : fin > 0 ? fin
                                               : IOAA_PROFILE_BESIDE_DEFAULT;
                    const double tp = x / 1e10, tc = bo * C / 1e10, wo = w * to;
                    /* the prefetch ends within the slowed window (the window's slowdown is
                     * what it adds), or after it (the rest of it at its own rate) */
                    const double added =
                        tp / f <= g * wo ? tp / f * (1 - 1 / g) : tp - f * g * wo + g * wo - wo;
                    const double tr = tc + added, tk = tn + (1 - 1 / g) * tr;
                    const double want =
                        bn && irq ? L * (to + fmax(tr, tk)) : L * (to + tr) + L * tn;
                    EXPECT_NEAR(ioaa_step_time(a, bn, (int64_t)bn * 4096, bo, NULL), want,
                                1e-9 * want);
                }
            ioaa_free(a);
        }
        ioaa_profile_data_free(&d);
    }
    /* the compute's slowdown per round size (recall.compute_beside as a table, 1.1 at 1 MB to
     * 1.5 at 100 MB): the fold takes it at each batch's prefetch round, b P; IRQ's normal layers
     * keep the profile's one (the table's largest) */
    {
        const double P = 3.2e6, C = 0.6e6, f = 0.4;
        struct ioaa_profile_data d;
        fold_tables(&d);
        d.prof.compute_beside = 1.5;
        d.info.beside = (struct ioaa_beside){
            .n = 1, .factor = {f}, .slow_n = 2, .slow_bytes = {1e6, 1e8}, .slow = {1.1, 1.5}};
        EXPECT_NEAR(ioaa_beside_slow(&d.info.beside, 0.5e6, 9), 1.1, 0);
        EXPECT_NEAR(ioaa_beside_slow(&d.info.beside, 50.5e6, 9), 1.3, 1e-12);
        EXPECT_NEAR(ioaa_beside_slow(&d.info.beside, 2e8, 9), 1.5, 0);
        const struct ioaa_beside none = {0};
        EXPECT_NEAR(ioaa_beside_slow(&none, 2e8, 1.25), 1.25, 0);
        EXPECT_EQ_INT(ioaa_profile_data_speculate(&d, P, C, 1, 32, err, sizeof err), PULSE_OK);
        const struct ioaa_params ip = {.profile = d.prof, .irq = 1};
        struct ioaa *a = ioaa_create(&ip, err, sizeof err);
        EXPECT(a != NULL);
        for (int bo = 1; a && bo <= 32; bo += 5) {
            const double to = 1e-3 + bo * 1e-4, x = bo * P, tp = x / 1e10, tc = bo * C / 1e10;
            const double g = fmin(1.5, fmax(1.1, 1.1 + 0.4 * (x - 1e6) / 99e6));
            const double added =
                tp / f <= g * to ? tp / f * (1 - 1 / g) : tp - f * g * to + g * to - to;
            const double want = L * (to + tc + added);
            EXPECT_NEAR(ioaa_step_time(a, 0, 0, bo, NULL), want, 1e-9 * want);
            /* with a normal batch: its layers beside the folded recall take the largest, 1.5 */
            const double tr = tc + added, tk = 2e-3 + (1 - 1 / 1.5) * tr;
            EXPECT_NEAR(ioaa_step_time(a, 4, 4 * 4096, bo, NULL), L * (to + fmax(tr, tk)),
                        1e-9 * want);
        }
        ioaa_free(a);
        ioaa_profile_data_free(&d);
    }
    struct ioaa_profile_data d;
    memset(&d, 0, sizeof d);
    EXPECT_EQ_INT(ioaa_profile_data_alloc(&d, 1, 1, 1, 1, err, sizeof err), PULSE_OK);
    d.tn_b[0] = d.to_b[0] = 1, d.tn_c[0] = 1024, d.tn[0] = d.to[0] = 1e-3;
    d.tr_bytes[0] = 1e6, d.tr[0] = 1e-4, d.prof.n_layers = 4;
    EXPECT_EQ_INT(ioaa_profile_data_speculate(&d, 0, 0, 1, 8, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(d.prof.tr_n, 1); /* nothing moves: unchanged */
    EXPECT_EQ_INT(ioaa_profile_data_speculate(&d, -1, 0, 1, 8, err, sizeof err), PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "prefetch -1 bytes");
    EXPECT_EQ_INT(ioaa_profile_data_speculate(&d, 1e6, NAN, 1, 8, err, sizeof err),
                  PULSE_ERR_INVALID);
    EXPECT_EQ_INT(ioaa_profile_data_speculate(&d, 1e6, 0, 1, 0, err, sizeof err),
                  PULSE_ERR_INVALID);
    EXPECT_EQ_INT(ioaa_profile_data_speculate(&d, 1e6, 0, 0, 8, err, sizeof err),
                  PULSE_ERR_INVALID);
    EXPECT_STR_CONTAINS(err, "window 0");
    EXPECT_EQ_INT(ioaa_profile_data_speculate(&d, 1e6, 0, 1.5, 8, err, sizeof err),
                  PULSE_ERR_INVALID);
    ioaa_profile_data_free(&d);
}

/* A stall in a table: s15's gather-scatter t_R (64 KB and 256 KB at 1.07 ms, 1 MB at 0.095 ms)
 * is found at its first point against the smallest later one; ordinary noise (s14's table, its
 * first point 1.2x the second's) and monotone tables are not; the factor is inclusive; the
 * first offending point is reported, against the smallest value after it. */
static void test_inverted(void)
{
    const double s15[6] = {1.0652e-3, 1.0659e-3, 0.0955e-3, 0.1462e-3, 0.4896e-3, 1.8122e-3};
    const double s14[6] = {0.050e-3, 0.041e-3, 0.078e-3, 0.136e-3, 0.442e-3, 1.618e-3};
    const double mono[4] = {1, 2, 3, 4}, edge[2] = {2, 1}, later[3] = {1, 3, 1.4};
    int i = -1, j = -1;
    EXPECT_EQ_INT(ioaa_profile_inverted(s15, 6, 2.0, &i, &j), 1);
    EXPECT_EQ_INT(i, 0);
    EXPECT_EQ_INT(j, 2);
    EXPECT_EQ_INT(ioaa_profile_inverted(s14, 6, 2.0, &i, &j), 0);
    EXPECT_EQ_INT(ioaa_profile_inverted(mono, 4, 2.0, &i, &j), 0);
    EXPECT_EQ_INT(ioaa_profile_inverted(mono, 1, 2.0, &i, &j), 0);
    EXPECT_EQ_INT(ioaa_profile_inverted(edge, 2, 2.0, &i, &j), 1);
    EXPECT_EQ_INT(ioaa_profile_inverted(later, 3, 2.0, &i, &j), 1);
    EXPECT_EQ_INT(i, 1);
    EXPECT_EQ_INT(j, 2);
    EXPECT_EQ_INT(ioaa_profile_inverted(later, 3, 2.2, &i, &j), 0);
}

static int nondecreasing(const double *v, int stride, int n)
{
    for (int i = 1; i < n; i++)
        if (v[i * stride] < v[(i - 1) * stride]) return 0;
    return 1;
}

static int positive(const double *v, int n)
{
    for (int i = 0; i < n; i++)
        if (!(v[i] > 0)) return 0;
    return 1;
}

/* pulse profile on the CPU with the tiny model: measured and analytic files. */
static void test_pulse_profile(void)
{
    char args[1024], out[8192], err[512];
    snprintf(args, sizeof args,
             "profile --backend cpu --model tiny --batches 1,2,3 --contexts 64,256 "
             "--recall-sizes 16K,64K --budget-tokens 128 --reps 2 --out %s",
             tmp_path);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    EXPECT_STR_CONTAINS(out, "t_N");
    struct ioaa_profile_data d = {0};
    EXPECT_EQ_INT(ioaa_profile_load(tmp_path, &d, err, sizeof err), PULSE_OK);
    const struct ioaa_profile *p = &d.prof;
    EXPECT(!strcmp(d.info.source, "measured"));
    EXPECT(!strcmp(d.info.model, "tiny"));
    EXPECT(!strcmp(d.info.backend, "cpu"));
    EXPECT(!strcmp(d.info.recall_engine, "per-block"));
    EXPECT_STR_EQ(d.info.device, "cpu");
    EXPECT_STR_CONTAINS(d.info.note, "approximated by the dense layer time");
    EXPECT_EQ_INT(p->n_layers, 4);
    EXPECT_EQ_INT(p->tn_nb, 3);
    EXPECT_EQ_INT(p->tn_nc, 2);
    EXPECT_EQ_INT(p->to_n, 3);
    EXPECT_EQ_INT(p->tr_n, 2);
    if (p->tn_nb == 3 && p->tn_nc == 2 && p->tr_n == 2) {
        EXPECT_NEAR(p->tn_b[2], 3, 0);
        EXPECT_NEAR(p->tn_c[1], 256, 0);
        /* headwise chunks: one KV head's K and V of a 16-token block, 4 KiB */
        EXPECT_NEAR(p->tr_bytes[0], 16384, 0);
        EXPECT_NEAR(p->tr_bytes[1], 65536, 0);
        EXPECT(positive(p->tn, 6) && positive(p->to, 3) && positive(p->tr, 2));
        for (int i = 0; i < 3; i++)
            EXPECT(nondecreasing(p->tn + i * 2, 1, 2));
        for (int j = 0; j < 2; j++)
            EXPECT(nondecreasing(p->tn + j, 2, 3));
        EXPECT(nondecreasing(p->to, 1, 3) && nondecreasing(p->tr, 1, 2));
    }
    /* r = 128 tokens x the default profile's mean churn x 512 bytes: a fraction of 64 KiB */
    EXPECT(p->recall_bytes > 0 && p->recall_bytes < 128 * 512);
    struct ioaa_params ip = {.profile = d.prof, .max_waiting = 8, .irq = 1};
    struct ioaa *a = ioaa_create(&ip, err, sizeof err);
    EXPECT(a != NULL);
    ioaa_free(a);
    /* the record beside the tables: samples per point, the read-back count */
    json_error_t je;
    json_t *r = json_load_file(tmp_path, 0, &je);
    EXPECT(r != NULL);
    json_t *meas = json_object_get(r, "measurement");
    EXPECT_EQ_INT(
        json_array_size(json_array_get(
            json_array_get(json_object_get(json_object_get(meas, "normal"), "samples_s"), 2), 1)),
        2);
    /* t_R's rounds: at least 21 interleaved passes whatever --reps says, each size's samples */
    json_t *rec = json_object_get(meas, "recall");
    EXPECT_EQ_INT(json_integer_value(json_object_get(rec, "passes")), 21);
    const json_int_t attempts = json_integer_value(json_object_get(rec, "attempts"));
    EXPECT(attempts >= 1 && attempts <= 3);
    EXPECT(json_is_boolean(json_object_get(rec, "stall_kept")));
    for (int i = 0; i < 2; i++)
        EXPECT_EQ_INT(json_array_size(json_array_get(json_object_get(rec, "samples_s"), i)), 21);
    EXPECT(json_is_integer(json_object_get(meas, "raised_by_reader")));
    EXPECT(json_object_get(r, "tool") != NULL);
    /* the CPU's default t_O is the dense approximation at the budget, r the churn estimate */
    json_t *of = json_object_get(meas, "offload"), *rb = json_object_get(meas, "recall_bytes");
    EXPECT(!strcmp(json_string_value(json_object_get(of, "method")), "dense-approx"));
    EXPECT_EQ_INT(json_integer_value(json_object_get(of, "context")), 128);
    EXPECT(!strcmp(json_string_value(json_object_get(rb, "from")), "locality churn"));
    EXPECT(json_real_value(json_object_get(rb, "used")) == p->recall_bytes);
    EXPECT(json_is_null(json_object_get(rb, "offload_steps")));
    json_decref(r);

    /* --recall-bytes sets r; --analytic writes the analytic tables */
    snprintf(args, sizeof args,
             "profile --backend cpu --model tiny --analytic --recall-bytes 4096 --out %s",
             tmp_path);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    EXPECT_EQ_INT(ioaa_profile_load(tmp_path, &d, err, sizeof err), PULSE_OK);
    EXPECT(!strcmp(d.info.source, "analytic"));
    EXPECT_NEAR(d.prof.recall_bytes, 4096, 0);
    EXPECT_EQ_INT(d.prof.tn_nc, 8);
    EXPECT_EQ_INT(d.raised, 0);
    ioaa_profile_data_free(&d);

    /* usage errors name the flag */
    EXPECT_EQ_INT(
        tu_run_pulse("profile --backend cpu --model tiny --contexts 256,64", out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "--contexts: must be strictly increasing");
    EXPECT_EQ_INT(tu_run_pulse("profile --backend cpu", out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "--model: required");
    /* a row whose KV does not fit after one context cannot be extrapolated */
    EXPECT_EQ_INT(tu_run_pulse("profile --backend cpu --model tiny --batches 1 --contexts "
                               "64,4096 --max-kv-gb 0.001",
                               out, sizeof out),
                  3);
    EXPECT_STR_CONTAINS(out, "fewer than two contexts");
}

static const char *str_at(const json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

static double real_at(const json_t *a, int i)
{
    return json_number_value(json_array_get(a, (size_t)i));
}

/* --offload-steps on the CPU: t_O(b) = S_O(b) / L - t_R(B(b) / L) from real arkvale steps, r
 * their recall per request and layer at the largest batch; both exactly as recorded. */
static void test_profile_offload_steps(void)
{
    char args[1024], out[8192], err[512];
    const char *base = "profile --backend cpu --model tiny --batches 1,2,3 --contexts 64,256 "
                       "--recall-sizes 16K,64K --budget-tokens 128 --reps 2";
    snprintf(args, sizeof args, "%s --offload-steps --out %s", base, tmp_path);
    const double t0 = pulse_now();
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    printf("pulse profile --offload-steps (tiny, cpu): %.2f s\n", pulse_now() - t0);
    EXPECT_STR_CONTAINS(out, "offload steps at 256 tokens");
    struct ioaa_profile_data d = {0};
    EXPECT_EQ_INT(ioaa_profile_load(tmp_path, &d, err, sizeof err), PULSE_OK);
    const struct ioaa_profile *p = &d.prof;
    EXPECT_STR_CONTAINS(d.info.note, "real offload steps (arkvale");
    EXPECT_EQ_INT(p->to_n, 3);
    EXPECT_EQ_INT(p->n_layers, 4);
    if (p->to_n == 3) EXPECT(positive(p->to, 3) && nondecreasing(p->to, 1, 3));
    EXPECT(p->recall_bytes > 0);
    struct ioaa_params ip = {.profile = d.prof, .max_waiting = 8, .irq = 1};
    struct ioaa *a = ioaa_create(&ip, err, sizeof err);
    EXPECT(a != NULL);

    json_error_t je;
    json_t *r = json_load_file(tmp_path, 0, &je);
    EXPECT(r != NULL);
    json_t *cfg = json_object_get(r, "config"), *meas = json_object_get(r, "measurement");
    json_t *of = json_object_get(meas, "offload"), *rb = json_object_get(meas, "recall_bytes");
    EXPECT(!strcmp(str_at(cfg, "t_offload"), "offload-steps"));
    EXPECT(!strcmp(str_at(of, "method"), "offload-steps"));
    EXPECT(!strcmp(str_at(of, "policy"), "arkvale+solohead+gs"));
    /* the default context: the largest of --contexts up to 1024 above the 128 + 4 x 16 the
     * steps select */
    EXPECT_EQ_INT(json_integer_value(json_object_get(of, "context")), 256);
    EXPECT_EQ_INT(json_integer_value(json_object_get(of, "sparse_layers")), 2);
    EXPECT(!strcmp(str_at(json_object_get(of, "dense_approx"), "method"), "dense-approx"));
    EXPECT(!strcmp(str_at(json_object_get(of, "offload"), "selection"), "headwise"));
    EXPECT_EQ_INT(json_array_size(json_object_get(of, "extrapolated")), 0);
    json_t *med = json_object_get(of, "step_median_s"),
           *bps = json_object_get(of, "recall_bytes_per_step");
    json_t *rpl = json_object_get(of, "recall_bytes_per_request_layer");
    json_t *trs = json_object_get(of, "t_recall_s"), *clamped = json_object_get(of, "clamped");
    json_t *written = json_object_get(json_object_get(r, "offload"), "layer_s");
    EXPECT_EQ_INT(json_array_size(med), 3);
    for (int i = 0; i < 3 && a; i++) {
        const int b = i + 1;
        json_t *pt = json_array_get(json_object_get(of, "points"), (size_t)i);
        EXPECT(!strcmp(str_at(pt, "status"), "ok"));
        EXPECT_EQ_INT(json_array_size(json_object_get(pt, "ms_samples")), 2);
        EXPECT_NEAR(real_at(med, i),
                    json_real_value(json_object_get(pt, "ms_per_step_median")) * 1e-3, 0);
        /* B(b): the steps' mean recall bytes; r_b = B / (b L) */
        const double B = real_at(bps, i);
        EXPECT(B == json_real_value(
                        json_object_get(json_object_get(pt, "mean_step_floor"), "recall_bytes")));
        EXPECT(i < 2 ? B >= 0 : B > 0);
        EXPECT(real_at(rpl, i) == B / (b * 4.0));
        /* t_R at b r_b = B / L, read from the profile as ioaa.h reads it */
        EXPECT(real_at(trs, i) == ioaa_t_recall(a, B / 4));
        int was_clamped = 0;
        for (size_t k = 0; k < json_array_size(clamped); k++)
            was_clamped |= json_integer_value(json_array_get(clamped, k)) == b;
        const double t = real_at(med, i) / 4 - real_at(trs, i);
        EXPECT(real_at(json_object_get(of, "derived_s"), i) == t);
        /* a clamped point keeps the dense approximation (measured, so > 0) */
        EXPECT(was_clamped ? !(t > 0) && real_at(written, i) > 0 : real_at(written, i) == t);
    }
    /* r: the steps' at the largest batch; the churn estimate beside it */
    EXPECT(!strcmp(str_at(rb, "from"), "offload steps"));
    EXPECT(p->recall_bytes == real_at(rpl, 2));
    EXPECT(json_real_value(json_object_get(rb, "used")) == p->recall_bytes);
    EXPECT(json_real_value(json_object_get(rb, "offload_steps")) == p->recall_bytes);
    EXPECT(json_real_value(json_object_get(rb, "churn_estimate")) > 0);
    EXPECT(!strcmp(str_at(cfg, "recall_bytes_from"), "offload steps"));
    json_decref(r);
    ioaa_free(a);

    /* --recall-bytes still sets r; the steps' value is recorded beside it */
    snprintf(args, sizeof args, "%s --offload-steps --recall-bytes 5000 --out %s", base, tmp_path);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    EXPECT_EQ_INT(ioaa_profile_load(tmp_path, &d, err, sizeof err), PULSE_OK);
    EXPECT_NEAR(d.prof.recall_bytes, 5000, 0);
    EXPECT(positive(d.prof.to, d.prof.to_n));
    r = json_load_file(tmp_path, 0, &je);
    rb = json_object_get(json_object_get(r, "measurement"), "recall_bytes");
    EXPECT(!strcmp(str_at(rb, "from"), "--recall-bytes"));
    EXPECT(json_real_value(json_object_get(rb, "offload_steps")) > 0);
    json_decref(r);

    /* --offload-approx: the dense approximation, as without the flag on the CPU */
    snprintf(args, sizeof args, "%s --offload-approx --out %s", base, tmp_path);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
    EXPECT_EQ_INT(ioaa_profile_load(tmp_path, &d, err, sizeof err), PULSE_OK);
    EXPECT_STR_CONTAINS(d.info.note, "approximated by the dense layer time");
    EXPECT(d.prof.recall_bytes > 0 && d.prof.recall_bytes < 128 * 512);
    r = json_load_file(tmp_path, 0, &je);
    meas = json_object_get(r, "measurement");
    EXPECT(!strcmp(str_at(json_object_get(meas, "offload"), "method"), "dense-approx"));
    EXPECT(json_real_value(json_object_get(json_object_get(meas, "recall_bytes"),
                                           "churn_estimate")) == d.prof.recall_bytes);
    json_decref(r);
    ioaa_profile_data_free(&d);

    /* the flags that do not go together, and a context the steps cannot use, are named */
    snprintf(args, sizeof args, "%s --offload-steps --offload-approx", base);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "one or the other");
    snprintf(args, sizeof args, "%s --offload-context 512", base);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "--offload-context: only with --offload-steps");
    snprintf(args, sizeof args, "%s --offload-steps --offload-context 192", base);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "not above the 192");
    snprintf(args, sizeof args, "%s --offload-steps --page-size 48", base);
    EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "not a multiple of the block size 48");
    EXPECT_EQ_INT(tu_run_pulse("profile --backend cpu --model tiny --analytic --offload-steps", out,
                               sizeof out),
                  2);
    EXPECT_STR_CONTAINS(out, "not with --analytic");
    /* a batch over the host pool (4 GB on cpu) is not run; one measured batch cannot be
     * extended to the next */
    EXPECT_EQ_INT(tu_run_pulse("profile --backend cpu --model tiny --batches 1,2 --contexts 64,256 "
                               "--recall-sizes 16K --budget-tokens 128 --reps 1 --offload-steps "
                               "--offload-context 4194304",
                               out, sizeof out),
                  3);
    EXPECT_STR_CONTAINS(out, "fewer than two batches");
}

/* recall.by_context: ioaa_bytes_at by hand (linear in log c, the ends outside), the JSON back
 * bit for bit, its refusals; and `pulse profile --bytes-contexts` on the CPU, exact and with
 * --speculate (bytes = prefetch + after the selection, the steps' timed recall), and its flags'
 * errors. */
static void test_by_context(void)
{
    char err[512], args[1024], out[8192];
    struct ioaa_bytes_by_context b = {.n = 3,
                                      .speculate = 1,
                                      .spec_margin = 0.25,
                                      .spec_from = "input",
                                      .source_bytes = 1.47e6,
                                      .context = {16384, 32768, 65536},
                                      .bytes = {0.9e6, 1.1e6, 1.3e6},
                                      .prefetch = {0.8e6, 0.95e6, 1.1e6},
                                      .after = {0.1e6, 0.15e6, 0.2e6}};
    double v, pre, aft;
    ioaa_bytes_at(&b, 16384, &v, &pre, &aft);
    EXPECT_NEAR(v, 0.9e6, 0);
    EXPECT_NEAR(pre, 0.8e6, 0);
    EXPECT_NEAR(aft, 0.1e6, 0);
    ioaa_bytes_at(&b, 16384 * M_SQRT2, &v, &pre, &aft); /* half way in log c */
    EXPECT_NEAR(v, 1.0e6, 1e-6);
    EXPECT_NEAR(pre, 0.875e6, 1e-6);
    EXPECT_NEAR(aft, 0.125e6, 1e-6);
    ioaa_bytes_at(&b, 49152, &v, &pre, &aft);
    EXPECT_NEAR(v, 1.1e6 + 0.2e6 * log(1.5) / log(2), 1e-6);
    ioaa_bytes_at(&b, 1000, &v, &pre, &aft); /* the end values outside */
    EXPECT_NEAR(v, 0.9e6, 0);
    ioaa_bytes_at(&b, 1e6, &v, &pre, &aft);
    EXPECT_NEAR(v, 1.3e6, 0);
    EXPECT_NEAR(aft, 0.2e6, 0);
    struct ioaa_bytes_by_context one = {.n = 1, .context = {4096}, .bytes = {5e5}};
    ioaa_bytes_at(&one, 65536, &v, &pre, &aft);
    EXPECT_NEAR(v, 5e5, 0);
    EXPECT_NEAR(pre, 0, 0);
    EXPECT_NEAR(aft, 0, 0);
    /* in a profile and back */
    struct ioaa_analytic_params ap = tiny_params();
    struct ioaa_profile_data d = {0}, back = {0};
    PULSE_CHECK(ioaa_profile_analytic(&ap, &d, err, sizeof err) == PULSE_OK, err);
    d.info.by_context = b;
    json_t *j = ioaa_profile_to_json(&d.prof, &d.info);
    EXPECT_EQ_INT(load_json(j, &back, err, sizeof err), PULSE_OK);
    EXPECT(!memcmp(&back.info.by_context, &b, sizeof b));
    /* refused: a context not increasing, a series of another length, a sum that is not the
     * bytes, a point or margin not pulse run's, speculation's series missing */
    json_t *bj = json_object_get(json_object_get(j, "recall"), "by_context");
    json_array_set_new(json_object_get(bj, "context"), 2, json_integer(32768));
    refused(j, "recall.by_context.context[2]: 32768 after 32768");
    json_array_set_new(json_object_get(bj, "context"), 2, json_integer(65536));
    json_array_remove(json_object_get(bj, "after_selection"), 0);
    refused(j, "recall.by_context.after_selection: expected 3 values");
    json_array_insert_new(json_object_get(bj, "after_selection"), 0, json_real(0.2e6));
    refused(j, "is not bytes 900000");
    json_array_set_new(json_object_get(bj, "after_selection"), 0, json_real(0.1e6));
    json_object_set_new(bj, "spec_from", json_string("output"));
    refused(j, "recall.by_context.spec_from");
    json_object_set_new(bj, "spec_from", json_string("mid"));
    json_object_set_new(bj, "spec_margin", json_real(1.5));
    refused(j, "recall.by_context.spec_margin");
    json_object_set_new(bj, "spec_margin", json_real(0));
    EXPECT_EQ_INT(load_json(j, &back, err, sizeof err), PULSE_OK);
    EXPECT_STR_EQ(back.info.by_context.spec_from, "mid");
    json_object_del(bj, "prefetch");
    refused(j, "recall.by_context.prefetch: expected 3 values");
    json_object_set_new(bj, "speculate", json_false()); /* exact: bytes only */
    EXPECT_EQ_INT(load_json(j, &back, err, sizeof err), PULSE_OK);
    EXPECT_EQ_INT(back.info.by_context.speculate, 0);
    EXPECT_NEAR(back.info.by_context.bytes[1], 1.1e6, 0);
    json_object_set_new(bj, "source_bytes", json_real(-1));
    refused(j, "recall.by_context.source_bytes: expected a number >= 0");
    json_object_set_new(bj, "source_bytes", json_real(1.47e6));
    json_object_set_new(bj, "speculate", json_string("yes"));
    refused(j, "recall.by_context: expected");
    json_decref(j);
    ioaa_profile_data_free(&d);

    /* measured on the CPU: exact, then with speculation */
    const char *base = "profile --backend cpu --model tiny --batches 1,2 --contexts 64,256 "
                       "--recall-sizes 16K,64K --budget-tokens 64 --reps 2 --selection solohead "
                       "--recall-engine gather-scatter";
    for (int spec = 0; spec < 2; spec++) {
        snprintf(args, sizeof args, "%s --bytes-contexts 256,512%s --out %s", base,
                 spec ? " --speculate --spec-margin 0.25" : "", tmp_path);
        EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 0);
        EXPECT_STR_CONTAINS(out, "recall by context");
        EXPECT_EQ_INT(ioaa_profile_load(tmp_path, &back, err, sizeof err), PULSE_OK);
        const struct ioaa_bytes_by_context *m = &back.info.by_context;
        EXPECT_EQ_INT(m->n, 2);
        EXPECT_EQ_INT(m->speculate, spec);
        EXPECT_NEAR(m->context[1], 512, 0);
        EXPECT(m->source_bytes > 0 && m->source_bytes < 64 * 512); /* a share of the budget's KV */
        json_error_t je;
        json_t *r = json_load_file(tmp_path, 0, &je);
        json_t *mb = json_object_get(json_object_get(r, "measurement"), "by_context");
        EXPECT_STR_EQ(str_at(mb, "policy"), spec ? "pulseinfer" : "arkvale+solohead+gs");
        const int timed = (int)json_integer_value(json_object_get(mb, "timed_steps"));
        EXPECT(timed >= 8);
        for (int i = 0; i < m->n && i < 2; i++) {
            /* the timed steps' recall over (steps x 2 requests x 4 layers), whole chunks */
            json_t *tr = json_object_get(json_array_get(json_object_get(mb, "points"), (size_t)i),
                                         "timed_recall");
            const double all = (double)json_integer_value(json_object_get(tr, "bytes"));
            EXPECT(all > 0);
            EXPECT_NEAR(m->bytes[i], all / (timed * 2 * 4), 1e-9 * all);
            /* whole SoloHead chunks: 16 tokens x 2 KV heads x 64 x K and V x 2 bytes */
            EXPECT_NEAR(fmod(all, 8192), 0, 0);
            if (spec) {
                EXPECT(m->prefetch[i] > 0);
                EXPECT_NEAR(m->prefetch[i] + m->after[i], m->bytes[i], 1e-6 * m->bytes[i]);
                EXPECT_NEAR(m->spec_margin, 0.25, 0);
                EXPECT_STR_EQ(m->spec_from, "input");
            } else {
                EXPECT_NEAR(m->prefetch[i] + m->after[i], 0, 0);
            }
        }
        json_decref(r);
    }
    ioaa_profile_data_free(&back);
    static const struct {
        const char *flags, *why;
    } bad[] = {{"--bytes-contexts 128", "--bytes-contexts: 128 tokens are not above the 128"},
               {"--bytes-contexts 512,256", "--bytes-contexts: must be strictly increasing"},
               {"--speculate", "--speculate: only with --bytes-contexts"},
               {"--bytes-contexts 256 --spec-margin 0.5", "--spec-margin: only with --speculate"},
               {"--analytic --bytes-contexts 256", "not with --analytic"},
               {"--bytes-contexts 256 --speculate --spec-margin 2",
                "pulse profile: --spec-margin: '2' is not a number in [0, 1]"},
               {"--bytes-contexts 256 --speculate --spec-from nowhere",
                "pulse profile: --spec-from: 'nowhere' is not input, mid or hits"}};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        snprintf(args, sizeof args, "%s %s", base, bad[i].flags);
        EXPECT_EQ_INT(tu_run_pulse(args, out, sizeof out), 2);
        EXPECT_STR_CONTAINS(out, bad[i].why);
    }
}

int main(void)
{
    test_overlap();
    test_speculate();
    snprintf(tmp_path, sizeof tmp_path, "/tmp/pulse_test_ioaa_profile_%d.json", (int)getpid());
    test_analytic();
    test_round_trip();
    test_rejects();
    test_running_max();
    test_by_context();
    test_cap_recall();
    test_inverted();
    test_pulse_profile();
    test_profile_offload_steps();
    remove(tmp_path);
    return tu_finish("test_ioaa_profile");
}
