/* The pulse command line: every bad input gets a one-line message naming the input and a
 * non-zero exit, never a crash; --help works on every subcommand; a good run writes a result
 * JSON with the fields DESIGN.md section 9 names. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static char out[1 << 16];

static int run(const char *args)
{
    return tu_run_pulse(args, out, sizeof out);
}

struct bad_case {
    const char *args, *message;
    int code;
};

static const struct bad_case bad[] = {
    {"", "usage: pulse", 2},
    {"frobnicate", "unknown command 'frobnicate'", 2},
    {"run --bogus", "unknown or incomplete option '--bogus'", 2},
    {"run --model", "unknown or incomplete option '--model'", 2},
    {"run --backend cpu --model gpt-9", "--model: unknown model 'gpt-9'", 2},
    {"run --backend cpu --policy magic", "--policy: unknown policy 'magic'", 2},
    {"run --backend tpu", "--backend: unknown backend 'tpu'", 2},
    {"run --backend cpu --output-len 0", "--output-len: '0' is not an integer", 2},
    {"run --backend cpu --output-len 12abc", "--output-len: '12abc' is not an integer", 2},
    {"run --backend cpu --kv-budget-gb -1", "--kv-budget-gb: '-1' is not a number", 2},
    {"run --backend cpu --kv-budget-gb nan", "--kv-budget-gb: 'nan' is not a number", 2},
    {"run --backend cpu --seed x", "--seed: 'x' is not an integer", 2},
    {"run --backend cpu --max-batch 0", "--max-batch: '0' is not an integer", 2},
    {"run --backend cpu --workload uniform:10", "--workload: 'uniform:10' is not uniform:LEN:COUNT",
     2},
    {"run --backend cpu --workload uniform:0:3", "is not uniform:LEN:COUNT", 2},
    {"run --backend cpu --workload zipf:1", "--workload: unknown kind", 2},
    {"run --backend cpu --workload lengths:5,,6", "length 2 is not an integer", 2},
    {"run --backend cpu --workload uniform:4096:1 --kv-budget-gb 0.001",
     "cannot hold even one request", 2},
    {"run --backend cpu extra", "unexpected argument 'extra'", 2},
    {"run --backend cpu --weights /nonexistent/ckpt", "--weights: /nonexistent/ckpt", 2},
    {"run --backend cpu --workload uniform:8:1 --output-len 2 --out /nonexistent/dir/r.json",
     "--out: /nonexistent/dir/r.json: cannot write", 2}, /* checked before the work */
    {"models --bogus", "unknown or incomplete option '--bogus'", 2},
    {"generate --prompt-ids 1", "--model is required", 2},
    {"generate --model tiny --prompt x --prompt-ids 1", "exactly one of --prompt and --prompt-ids",
     2},
    {"generate --model tiny --backend cpu --prompt-ids 5,99999",
     "--prompt-ids: '5,99999' is not a list", 2},
    {"generate --model tiny --backend cpu --prompt hello", "'tiny' has no tokenizer", 2},
    {"generate --model tiny --policy magic --prompt-ids 1", "--policy: 'magic' is not available",
     2},
    {"generate --model /nonexistent/m --prompt-ids 1", "is no built-in model", 2},
    /* a token budget means and accepts the same in every command: [0, 2^24], a multiple of the
     * block size, one message */
    {"generate --model tiny --backend cpu --prompt-ids 1 --policy solohead --budget-tokens 20",
     "pulse generate: --budget-tokens: 20 is not a multiple of the block size 16", 2},
    {"run --backend cpu --policy infinigen --budget-tokens 20",
     "pulse run: --budget-tokens: 20 is not a multiple of the block size 16 (--page-size)", 2},
    {"profile-heads --model tiny --backend cpu --budget-tokens 20 --out /tmp/pulse_cli_x.json",
     "pulse profile-heads: --budget-tokens: 20 is not a multiple of the block size 16", 2},
    /* profile-heads takes the engine's options (runtime_opts.h) */
    {"profile-heads --model tiny --backend cpu --cpu-threads 0 --out /tmp/pulse_cli_x.json",
     "pulse profile-heads: --cpu-threads: '0' is not an integer in [1, 64]", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --mam-budget 20",
     "pulse accuracy: --mam-budget: 20 is not a multiple of the block size 16", 2},
    {"generate --model tiny --backend cpu --prompt-ids 1 --policy solohead --budget-tokens -16",
     "--budget-tokens: '-16' is not an integer in [0, 16777216]", 2},
    {"run --backend cpu --policy arkvale --budget-tokens 16777217",
     "--budget-tokens: '16777217' is not an integer in [0, 16777216]", 2},
    {"profile --backend cpu --model tiny --budget-tokens 16777217 --out /tmp/pulse_cli_x.json",
     "--budget-tokens: '16777217' is not an integer in [0, 16777216]", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --budgets 16,16777232",
     "--budgets: '16777232' is not an integer in [0, 16777216]", 2},
    {"generate --model tiny --backend cpu --prompt-ids 1 --policy solohead --selector 9",
     "9 is not a KV head (0..1)", 2},
    {"generate --model tiny --backend cpu --prompt-ids 1 --policy solohead-q --selector 9",
     "9 is not a query head (0..3)", 2},
    {"generate --model tiny --backend cpu --prompt-ids 1 --policy quest",
     "'quest' is not available here", 2},
    {"bench decode-step --model tiny --backend cpu --peer "
     "experiments/peer/results/h200-qwen3-14b.json "
     "--points 1x64",
     "measured qwen3-14b, this run is tiny: not comparable", 2},
    {"accuracy --data d --lengths 4096 --tasks passkey", "--model is required", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --cache-slots 200,131",
     "--cache-slots: 131 is under the 132 blocks one step selects", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --cache-slots 1,2,3,4,5",
     "--cache-slots: 5 sizes, at most 4", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --meter-steps 0",
     "--meter-steps: '0' is not an integer in [1, 4096]", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --policies full,headwise "
     "--meter-steps 32",
     "--meter-steps: needs solohead or solohead-q among the policies and --mam-budget 2048", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --policies full,headwise "
     "--churn-profile /tmp/pulse_cli_x.json",
     "--churn-profile: needs solohead or solohead-q among the policies and --mam-budget 2048", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --policies solohead "
     "--budgets 1024 --meter-steps 32",
     "--meter-steps: needs solohead or solohead-q among the policies and --mam-budget 2048", 2},
    {"accuracy --model tiny --tasks passkey", "exactly one of --data and --longbench", 2},
    {"accuracy --model tiny --data d --tasks passkey", "--data needs --lengths", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks nosuch", "'nosuch' is not a", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --policies full,magic",
     "--policies: 'magic' is not a policy", 2},
    {"accuracy --model tiny --data d --lengths 4096 --max-length 8192 --tasks passkey",
     "--max-length is for --longbench", 2},
    {"accuracy --model tiny --longbench d --lengths 4096 --tasks passkey",
     "--lengths is for --data", 2},
    {"accuracy --model tiny --data d --lengths 4096,,8192 --tasks passkey",
     "--lengths: '4096,,8192' has an empty element (item 2)", 2},
    {"accuracy --model tiny --data d --lengths 4096, --tasks passkey", "has an empty element", 2},
    {"run --policy pulseinfer --max-waiting 0", "--max-waiting: '0' is not a count", 2},
    {"run --policy arkvale --max-waiting 30", "--max-waiting: only for pulseinfer", 2},
    {"run --policy arkvale --recall-cap-fraction 0", "--recall-cap-fraction", 2},
    {"run --policy arkvale --recall-cap-fraction 1.5", "--recall-cap-fraction", 2},
    {"run --policy arkvale --recall-cap-fraction 0.5 --recall-cap-gbps 3",
     "--recall-cap-gbps and --recall-cap-fraction: give one", 2},
    {"run --policy arkvale --recall-cap-gbps 3 --recall-cap-fraction 0.5",
     "--recall-cap-fraction and --recall-cap-gbps: give one", 2},
    {"reproduce --repeat 0", "--repeat", 2},
    {"reproduce --repeat 21", "--repeat", 2},
    {"workload --workload drift:10:100:4", "drift:FROM:TO:COUNT", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --chat-template llama",
     "--chat-template: 'llama' is not auto, none, gemma or chatml", 2},
    {"accuracy --model tiny --data d --lengths 4096,4096 --tasks passkey",
     "--lengths: '4096' is listed twice", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey, --policies full",
     "--tasks: 'passkey,' has an empty element", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --policies ,full",
     "--policies: ',full' has an empty element (item 1)", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --budgets 500",
     "500 is not a multiple of the block size 16", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --infinigen-frac 2",
     "--infinigen-frac", 2},
    {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --time-limit 0",
     "--time-limit: '0' is not a number in [0.001, 1e+07]", 2},
    {"accuracy --model tiny --data /nonexistent --lengths 4096 --tasks passkey",
     "carries no tokenizer", 2},
    {"synth --task passkey --length 512 --out-dir /tmp/pulse_cli_synth --tokenizer "
     "/nonexistent.gguf",
     "--tokenizer: ", 2},
    {"recall-bench --backend cpu --cap-unit 3Q", "--cap-unit: '3Q' is not a size", 2},
    {"recall-bench --backend cpu --cap-burst x", "--cap-burst: 'x' is not a size", 2},
    {"bench frob", "unknown benchmark 'frob'", 2},
    {"bench decode-step --backend cpu --points 4x", "--points: '4x' is not", 2},
    /* one strict parser: decimal only, no hex, no surrounding spaces, no sign where none fits,
     * no empty list element; the range in the message */
    {"run --backend cpu --max-batch 0x10", "--max-batch: '0x10' is not an integer in [1, 4096]", 2},
    {"run --backend cpu --max-batch ' 8'", "--max-batch: ' 8' is not an integer in [1, 4096]", 2},
    {"run --backend cpu --seed +3", "--seed: '+3' is not an integer in [0, ", 2},
    {"run --backend cpu --kv-budget-gb 0x1p-3", "--kv-budget-gb: '0x1p-3' is not a number in [", 2},
    {"run --backend cpu --kv-budget-gb ' 1'", "--kv-budget-gb: ' 1' is not a number", 2},
    {"run --backend cpu --workload 'uniform: 8:2'", "is not uniform:LEN:COUNT", 2},
    {"run --backend cpu --workload 'lengths:5, 6'", "length 2 is not an integer", 2},
    {"run --backend cpu --workload lengths:5,6,",
     "length 3 is not an integer in [1, 16777216] (empty)", 2},
    {"bench decode-step --backend cpu --points 1x64,", "--points: '1x64,' has an empty element", 2},
    {"bench decode-step --backend cpu --points ' 1x64'", "--points: ' 1x64' is not BATCHxCONTEXT",
     2},
    {"recall-bench --backend cpu --sizes 8K,,16K", "--sizes: '8K,,16K' has an empty element", 2},
    {"recall-bench --backend cpu --sizes ,8K", "has an empty element (item 1)", 2},
    {"recall-bench --backend cpu --cap-unit 0x10K", "--cap-unit: '0x10K' is not a size", 2},
    {"recall-bench --backend cpu --cap-unit ' 8K'", "--cap-unit: ' 8K' is not a size", 2},
    /* a value given twice, or two flags that conflict, is refused, not silently overridden */
    {"run --backend cpu --seed 1 --seed 2", "pulse run: --seed given twice", 2},
    {"run --backend cpu --policy arkvale --budget-tokens 16 --budget-tokens 32",
     "--budget-tokens given twice", 2},
    {"run --backend cpu --weights /nonexistent/ckpt --model tiny",
     "--weights and --model: give one", 2},
    {"bench decode-step --backend cpu --points 1x64 --points 2x64", "--points given twice", 2},
    {"recall-bench --backend cpu --sizes 8K --sizes 16K", "--sizes given twice", 2},
    {"profile --backend cpu --batches 1 --batches 2", "--batches given twice", 2},
    /* a churn profile that cannot be read or laid onto the model is refused, not taken as 0 */
    {"profile --backend cpu --model tiny --analytic --locality-profile /nonexistent/p.json --out "
     "/tmp/pulse_cli_x.json",
     "pulse profile: --locality-profile: /nonexistent/p.json: cannot open", 2},
    {"generate --backend cpu --model tiny --max-new-tokens 4 --max-new-tokens 5 --prompt x",
     "pulse generate: --max-new-tokens given twice", 2},
    {"accuracy --model tiny --samples 1 --samples 2 --tasks passkey --data d --lengths 4096",
     "pulse accuracy: --samples given twice", 2},
    /* the runtime's shared options (experiments/runtime_opts.h): range-checked in every command
     * that takes them, one line each; a command takes only its groups */
    {"run --backend cpu --zc-blocks 0",
     "pulse run: --zc-blocks: '0' is not an integer in [1, 65535] (decimal)", 2},
    {"run --backend cpu --gs-threads 257",
     "pulse run: --gs-threads: '257' is not an integer in [1, 256]", 2},
    {"run --backend cpu --pin mmap", "pulse run: --pin: 'mmap' is not alloc or register", 2},
    {"run --backend cpu --pin-numa 4096",
     "pulse run: --pin-numa: '4096' is not an integer in [-1, 4095], nearest or none", 2},
    {"run --backend cpu --recall-wait 0", "pulse run: --recall-wait: '0' is not device or host", 2},
    {"run --backend cpu --layer-graphs 1", "pulse run: --layer-graphs: '1' is not on or off", 2},
    {"run --backend cpu --predict-stream side",
     "pulse run: --predict-stream: 'side' is not fork or inline", 2},
    {"run --backend cpu --select-launch both",
     "pulse run: --select-launch: 'both' is not joint or apart", 2},
    {"run --backend cpu --plan-launch both",
     "pulse run: --plan-launch: 'both' is not fused or apart", 2},
    {"run --backend cpu --correction-stream side",
     "pulse run: --correction-stream: 'side' is not own or gather", 2},
    {"run --backend cpu --locality-anchor 17",
     "pulse run: --locality-anchor: '17' is not a number in [0, 16] (decimal)", 2},
    {"run --backend cpu --policy pulseinfer --query real --locality-anchor 1",
     "pulse run: --locality-anchor: only with the locality query (not --query real)", 2},
    {"run --backend cpu --policy vanilla --locality-anchor 1",
     "pulse run: --locality-anchor: only for offload policies (arkvale, infinigen, pulseinfer)", 2},
    {"run --backend cpu --run-ahead no", "pulse run: --run-ahead: 'no' is not on or off", 2},
    {"run --backend cpu --cpu-threads 65",
     "pulse run: --cpu-threads: '65' is not an integer in [1, 64]", 2},
    {"run --backend cpu --attn-min-tiles 3", "--attn-min-tiles: '3' is not an integer in [4, 4096]",
     2},
    {"run --backend cpu --zc-blocks 4 --zc-blocks 8", "pulse run: --zc-blocks given twice", 2},
    {"bench decode-step --backend cpu --attn-blocks-per-sm 17",
     "pulse bench: --attn-blocks-per-sm: '17' is not an integer in [1, 16]", 2},
    {"bench decode-step --backend cpu --run-ahead off",
     "unknown or incomplete option '--run-ahead'", 2},
    {"recall-bench --backend cpu --zc-inflight-kb 257",
     "pulse recall-bench: --zc-inflight-kb: '257' is not an integer in [1, 256]", 2},
    {"recall-bench --backend cpu --layer-graphs off",
     "unknown or incomplete option '--layer-graphs'", 2},
    {"profile --backend cpu --model tiny --gs-stages 65", "pulse profile: --gs-stages: '65' is not",
     2},
    {"generate --model tiny --backend cpu --prompt-ids 3 --cpu-threads 0",
     "pulse generate: --cpu-threads: '0' is not an integer in [1, 64]", 2},
    {"accuracy --model tiny --attn-min-tiles x", "pulse accuracy: --attn-min-tiles: 'x' is not", 2},
    {"accuracy --model tiny --zc-blocks 4", "unknown or incomplete option '--zc-blocks'", 2},
};

/* Output paths are checked before the work (exit 2) in every command that writes one: a
 * missing folder, a directory, an empty path, two outputs on one file (by name or through a
 * link); and a usage error never replaces a file that is there. */
static void test_outputs(void)
{
    char keep[] = "/tmp/pulse_cli_keep_XXXXXX", link[64];
    const int fd = mkstemp(keep);
    EXPECT(fd >= 0);
    if (fd < 0) return;
    static const char text[] = "{\"kept\": true}\n";
    EXPECT_EQ_INT((int)write(fd, text, sizeof text - 1), (int)(sizeof text - 1));
    close(fd);
    snprintf(link, sizeof link, "%s.link", keep);
    EXPECT_EQ_INT(symlink(keep, link), 0);
    static const struct {
        const char *args, *message; /* %1$s: the kept file, %2$s: its link */
    } cases[] = {
        {"run --backend cpu --out /nonexistent/r.json", "--out: /nonexistent/r.json: cannot write"},
        {"run --backend cpu --out /tmp", "--out: /tmp: is a directory"},
        {"run --backend cpu --out ''", "--out: an empty path"},
        {"run --backend cpu --policy pulseinfer --out %1$s --trace %1$s",
         "--out and --trace: both write"},
        {"run --backend cpu --policy pulseinfer --out %1$s --trace %2$s",
         "--out and --trace: both write"},
        {"run --backend cpu --cupti --out %1$s", "--cupti: needs the cuda backend"},
        {"bench decode-step --backend cpu --cupti --out %1$s", "--cupti: needs the cuda backend"},
        {"bench decode-step --policy arkvale --cupti --out %1$s", "--cupti: vanilla steps only"},
        {"run --backend cpu --policy magic --out %1$s", "--policy: unknown policy"},
        {"bench decode-step --backend cpu --out /nonexistent/b.json", "--out: /nonexistent"},
        {"profile --backend cpu --model tiny --out /nonexistent/p.json", "--out: /nonexistent"},
        {"profile-heads --model tiny --out /nonexistent/h.json", "--out: /nonexistent"},
        {"recall-bench --backend cpu --out /nonexistent/c.json", "--out: /nonexistent"},
        {"generate --model tiny --backend cpu --prompt-ids 1 --out /nonexistent/g.json",
         "--out: /nonexistent"},
        {"accuracy --model tiny --data d --lengths 4096 --tasks passkey --out %1$s "
         "--churn-profile %1$s",
         "--out and --churn-profile: both write"},
        {"reproduce --tiny --out-dir ''", "--out-dir: an empty path"},
        {"synth --task passkey --length 4096 --out-dir ''", "--out-dir: an empty path"},
    };
    char args[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(args, sizeof args, cases[i].args, keep, link);
        const int code = run(args);
        EXPECT_EQ_INT(code, 2);
        EXPECT_STR_CONTAINS(out, cases[i].message);
        if (code != 2) fprintf(stderr, "output case '%s': exit %d: %s", args, code, out);
        FILE *f = fopen(keep, "r");
        char got[64] = {0};
        if (f) {
            EXPECT(fread(got, 1, sizeof got - 1, f) > 0);
            fclose(f);
        }
        EXPECT(!strcmp(got, text)); /* untouched */
    }
    unlink(link);
    unlink(keep);
}

/* Every diagnostic PULSE_* variable (runtime/common.h) refuses junk alike: one warning naming
 * the variable, its value and what it takes, and the default stands (the run goes on and
 * succeeds). */
static void test_env_junk(void)
{
    static const struct {
        const char *name, *value, *says;
    } env[] = {
        {"PULSE_OFFLOAD_VERIFY", "on", "PULSE_OFFLOAD_VERIFY=on: expected an integer in 0..1"},
        {"PULSE_PROGRESS", "2", "PULSE_PROGRESS=2: expected an integer in 0..1"},
        {"PULSE_STACKS_AFTER_S", "soon", "PULSE_STACKS_AFTER_S=soon: expected a number in"},
        {"PULSE_OFFLOAD_TRACE", "x", "PULSE_OFFLOAD_TRACE=x: expected an integer in 0..1"},
    };
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++)
        setenv(env[i].name, env[i].value, 1);
    EXPECT_EQ_INT(run("run --backend cpu --policy arkvale --workload uniform:64:1 --output-len 2"),
                  0);
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) {
        EXPECT_STR_CONTAINS(out, env[i].says);
        unsetenv(env[i].name);
    }
}

/* A tuning variable that became an option is refused by every command, before any work, with
 * one line naming the option and the value to give it; the run goes on once it is unset. */
static void test_env_refused(void)
{
    static const struct {
        const char *name, *value, *args, *says;
    } env[] = {
        {"PULSE_ZC_BLOCKS", "8", "run --backend cpu",
         "pulse: PULSE_ZC_BLOCKS=8: this variable is no longer read: give --zc-blocks 8 on"},
        {"PULSE_DEVICE_WAIT", "0", "bench decode-step --backend cpu --model tiny",
         "PULSE_DEVICE_WAIT=0: this variable is no longer read: give --recall-wait host on"},
        {"PULSE_SERVE_RUN_AHEAD", "0", "models", "give --run-ahead off on"},
        {"PULSE_PIN", "alloc", "recall-bench --backend cpu", "give --pin alloc on"},
        {"PULSE_CPU_THREADS", "lots", "run --backend cpu", "give --cpu-threads on the"},
    };
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) {
        setenv(env[i].name, env[i].value, 1);
        EXPECT_EQ_INT(run(env[i].args), 2);
        unsetenv(env[i].name);
        EXPECT_STR_CONTAINS(out, env[i].says);
        char *nl = strchr(out, '\n');
        EXPECT(nl == NULL || nl[1] == 0); /* one line */
    }
}

static void test_bad_inputs(void)
{
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int code = run(bad[i].args);
        if (code != bad[i].code || !strstr(out, bad[i].message))
            fprintf(stderr, "case '%s': exit %d, output: %s", bad[i].args, code, out);
        EXPECT_EQ_INT(code, bad[i].code);
        EXPECT_STR_CONTAINS(out, bad[i].message);
        /* a usage error is one line: the message is the whole output */
        char *nl = strchr(out, '\n');
        if (bad[i].args[0] && bad[i].code == 2) EXPECT(nl == NULL || nl[1] == 0);
    }
}

/* A pool the backend cannot allocate is a result with status "oom" and exit 3, not a crash.
 * 500 TB is past a 47-bit address space; a host that grants it anyway (5-level paging with
 * overcommit, seen on the GPU machine) runs the job instead, which this test reports. */
static void test_oom_result(void)
{
    char path[] = "/tmp/pulse_oom_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    char args[512];
    snprintf(args, sizeof args,
             "run --backend cpu --kv-budget-gb 500000 --workload uniform:16:1 --output-len 2 "
             "--out %s",
             path);
    int code = run(args);
    EXPECT(code == 3 || code == 0);
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    EXPECT(r != NULL);
    if (code == 0) {
        fprintf(stderr, "test_cli: this host granted a 500 TB pool; the OOM path was not "
                        "exercised here\n");
    } else if (r) {
        EXPECT_STR_CONTAINS(out, "cannot allocate a 500000.000 GB KV pool");
        EXPECT(!strcmp(json_string_value(json_object_get(r, "status")), "oom"));
        EXPECT_STR_CONTAINS(json_string_value(json_object_get(r, "error")), "KV pool");
        EXPECT(json_object_get(r, "config") != NULL);
    }
    json_decref(r);
    unlink(path);
}

/* A workload spec past its 255 characters says so, and a list longer than the old 512-byte
 * buffer of cli_list is parsed. */
static void test_long_values(void)
{
    char args[4096] = "run --backend cpu --workload lengths:";
    for (int i = 0; i < 80; i++)
        strcat(args, i ? ",100" : "100");
    EXPECT_EQ_INT(run(args), 2);
    EXPECT_STR_CONTAINS(out, "--workload: the spec is 327 characters, at most 255");
    snprintf(args, sizeof args, "recall-bench --backend cpu --counts ");
    for (int i = 0; i < 200; i++)
        strcat(args, i ? ",1000" : "1000");
    EXPECT_EQ_INT(run(args), 2);
    EXPECT_STR_CONTAINS(out, "--counts: more than");
}

/* bench --peer: a directory says so, a JSON that is not a peer result names its first bad field,
 * a peer without the point prints "-" and never nan. */
/* The runtime's options reach every command that takes them: bench decode-step's config, a
 * sweep grid's points (like any other flag) and pulse reproduce's points, profiles and
 * recall-bench run (each the options of its groups). */
static void test_options_pass_through(void)
{
    const char *path = "/tmp/pulse_cli_opts.json";
    EXPECT_EQ_INT(run("bench decode-step --backend cpu --model tiny --points 1x64 --iters 1 "
                      "--warmup 0 --cpu-threads 1 --attn-min-tiles 32 --pin alloc "
                      "--out /tmp/pulse_cli_opts.json"),
                  0);
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je),
           *o = json_object_get(json_object_get(r, "config"), "options");
    EXPECT_EQ_INT(json_integer_value(json_object_get(o, "cpu_threads")), 1);
    EXPECT_EQ_INT(json_integer_value(json_object_get(o, "attn_min_tiles")), 32);
    EXPECT_STR_EQ(json_string_value(json_object_get(o, "pin")), "alloc");
    EXPECT(json_object_get(o, "run_ahead") == NULL); /* no serving loop here */
    json_decref(r);
    unlink(path);
    /* generate (and accuracy) take the engine's */
    EXPECT_EQ_INT(run("generate --model tiny --backend cpu --prompt-ids 3 --max-new-tokens 1 "
                      "--cpu-threads 1 --out /tmp/pulse_cli_opts.json"),
                  0);
    r = json_load_file(path, 0, &je);
    o = json_object_get(json_object_get(r, "config"), "options");
    EXPECT_EQ_INT(json_integer_value(json_object_get(o, "cpu_threads")), 1);
    EXPECT(json_object_get(o, "zc_blocks") == NULL);
    json_decref(r);
    unlink(path);
    /* a grid's flag */
    FILE *f = fopen("/tmp/pulse_cli_grid.json", "w");
    fputs("{\"out_dir\": \"/tmp/pulse_cli_grid\", \"base\": {\"--backend\": \"cpu\", "
          "\"--policy\": \"arkvale\", \"--recall-engine\": \"zero-copy\", \"--workload\": "
          "\"uniform:64:1\", \"--output-len\": 2, \"--run-ahead\": \"off\"}, \"axes\": "
          "{\"--zc-blocks\": [2, 8]}}",
          f);
    fclose(f);
    EXPECT_EQ_INT(run("sweep /tmp/pulse_cli_grid.json"), 0);
    for (int b = 2; b <= 8; b += 6) {
        char p[128];
        snprintf(p, sizeof p, "/tmp/pulse_cli_grid/zc-blocks=%d.json", b);
        r = json_load_file(p, 0, &je);
        o = json_object_get(json_object_get(r, "config"), "options");
        if (!r) fprintf(stderr, "%s: %s\n", p, je.text);
        EXPECT_EQ_INT(json_integer_value(json_object_get(o, "zc_blocks")), b);
        EXPECT_STR_EQ(json_string_value(json_object_get(o, "run_ahead")), "off");
        json_decref(r);
        unlink(p);
    }
    rmdir("/tmp/pulse_cli_grid");
    unlink("/tmp/pulse_cli_grid.json");
    /* pulse reproduce: every point, the profiles and recall-bench, each its groups' */
    EXPECT_EQ_INT(run("reproduce --tiny --dry-run --only e2e,recall --zc-blocks 8 --run-ahead off "
                      "--out-dir /tmp/pulse_cli_repro"),
                  0);
    EXPECT_STR_CONTAINS(out, "pulse run --backend cpu --model tiny");
    EXPECT_STR_CONTAINS(out, "--zc-blocks 8 --run-ahead off --policy vanilla");
    EXPECT_STR_CONTAINS(out, "--recall-engine zero-copy --out /tmp/pulse_cli_repro/profile/"
                             "ioaa_zero-copy.json --zc-blocks 8\n");
    EXPECT_STR_CONTAINS(out, "--out /tmp/pulse_cli_repro/recall/recall.json --zc-blocks 8\n");
    EXPECT_EQ_INT(run("reproduce --tiny --dry-run --zc-blocks 0"), 2);
    EXPECT_STR_CONTAINS(out, "pulse reproduce: --zc-blocks: '0' is not an integer in [1, 65535]");
}

static void test_bench_peer(void)
{
    const char *path = "/tmp/pulse_cli_peer.json";
    struct {
        const char *json, *message;
    } bad_peers[] = {
        {"{}", "--peer: /tmp/pulse_cli_peer.json: no \"points\" array"},
        {"[1, 2]", "no \"points\" array"},
        {"{\"points\": [{\"batch\": 1}]}", "points[0].context is not an integer >= 1"},
        {"{\"points\": [{\"batch\": 1, \"context\": 64, \"status\": \"oom\"}, "
         "{\"batch\": 2, \"context\": 64, \"ms_per_step_median\": \"fast\"}]}",
         "points[1].ms_per_step_median is not a positive number"},
    };
    char args[512];
    for (size_t i = 0; i < sizeof bad_peers / sizeof bad_peers[0]; i++) {
        FILE *f = fopen(path, "w");
        fputs(bad_peers[i].json, f);
        fclose(f);
        snprintf(args, sizeof args,
                 "bench decode-step --backend cpu --model tiny --points 1x64 --iters 1 "
                 "--warmup 0 --peer %s",
                 path);
        EXPECT_EQ_INT(run(args), 2);
        EXPECT_STR_CONTAINS(out, bad_peers[i].message);
    }
    EXPECT_EQ_INT(run("bench decode-step --backend cpu --model tiny --points 1x64 --peer /tmp"), 2);
    EXPECT_STR_CONTAINS(out, "--peer: /tmp: is a directory");
    FILE *f = fopen(path, "w");
    fputs("{\"points\": [{\"batch\": 1, \"context\": 64, \"status\": \"oom\"}, "
          "{\"batch\": 2, \"context\": 64, \"ms_per_step_median\": 0.5}]}",
          f);
    fclose(f);
    snprintf(args, sizeof args,
             "bench decode-step --backend cpu --model tiny --points 1x64,2x64,3x64 --iters 1 "
             "--warmup 0 --peer %s",
             path);
    EXPECT_EQ_INT(run(args), 0);
    EXPECT(strstr(out, "nan") == NULL);
    unlink(path);
}

static void test_help(void)
{
    const char *cmds[] = {
        "--help",         "run --help", "models --help", "bench --help", "bench decode-step --help",
        "generate --help"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        EXPECT_EQ_INT(run(cmds[i]), 0);
        EXPECT_STR_CONTAINS(out, "usage: pulse");
    }
}

static void test_models(void)
{
    EXPECT_EQ_INT(run("models"), 0);
    EXPECT_STR_CONTAINS(out, "qwen3-14b");
    EXPECT_STR_CONTAINS(out, "14.768B");  /* 40 layers of 5120 hidden, MLP 17408, vocab 151936 */
    EXPECT_STR_CONTAINS(out, "160.0KiB"); /* 40 layers x 8 heads x 128 x K,V x 2 bytes */
    EXPECT_EQ_INT(run("models --json"), 0);
    json_error_t je;
    json_t *a = json_loads(out, 0, &je);
    EXPECT(json_is_array(a) && json_array_size(a) == 6);
    /* Gemma 3 270M: 167.8M embedding (tied) + 100.3M in the blocks; 3 of 18 layers global */
    json_t *g = json_array_get(a, 3);
    EXPECT_STR_CONTAINS(json_string_value(json_object_get(g, "name")), "gemma3-270m");
    EXPECT_STR_CONTAINS(json_string_value(json_object_get(g, "arch")), "gemma3");
    EXPECT_EQ_INT(json_integer_value(json_object_get(g, "global_layers")), 3);
    EXPECT_EQ_INT(json_integer_value(json_object_get(g, "params")) / 1000000, 268);
    json_decref(a);
}

static void test_good_run(void)
{
    char path[] = "/tmp/pulse_cli_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    char args[512];
    snprintf(args, sizeof args,
             "run --backend cpu --model tiny --workload uniform:40:3 --output-len 5 --seed 3 "
             "--out %s",
             path);
    EXPECT_EQ_INT(run(args), 0);
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    EXPECT(r != NULL);
    if (r) {
        EXPECT_EQ_INT(json_integer_value(json_object_get(r, "schema_version")), 1);
        EXPECT(!strcmp(json_string_value(json_object_get(r, "status")), "ok"));
        json_t *tool = json_object_get(r, "tool");
        EXPECT(json_string_length(json_object_get(tool, "git_commit")) >= 7);
        EXPECT(json_is_boolean(json_object_get(tool, "git_dirty")));
        json_t *cfg = json_object_get(r, "config");
        EXPECT(!strcmp(json_string_value(json_object_get(cfg, "policy")), "vanilla"));
        EXPECT_EQ_INT(json_integer_value(json_object_get(cfg, "seed")), 3);
        json_t *wl = json_object_get(r, "workload");
        EXPECT_EQ_INT(json_integer_value(json_object_get(wl, "requests")), 3);
        json_t *m = json_object_get(r, "metrics");
        EXPECT(json_real_value(json_object_get(m, "output_throughput")) > 0);
        EXPECT_EQ_INT(json_integer_value(json_object_get(m, "total_output_tokens")), 15);
        const char *keys[] = {"mean_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "p90_e2el_ms"};
        for (int i = 0; i < 4; i++)
            EXPECT(json_real_value(json_object_get(m, keys[i])) > 0);
        json_t *c = json_object_get(r, "counters");
        EXPECT_EQ_INT(json_integer_value(json_object_get(c, "recall_bytes")), 0);
        EXPECT_EQ_INT(json_integer_value(json_object_get(c, "layer_switches")), 0);
        EXPECT_EQ_INT(json_integer_value(json_object_get(c, "step_alloc_calls")), 0);
        EXPECT_EQ_INT(json_integer_value(json_object_get(c, "steps")), 5);
        EXPECT_EQ_INT(json_array_size(json_object_get(r, "requests")), 3);
        json_decref(r);
    }
    unlink(path);
}

/* pulse generate with a sparse policy on the decoded tokens: a budget covering the context gives
 * vanilla's tokens; a small one attends part of it (the stats line says how much). */
static void test_generate_sparse(void)
{
    char args[4096], ids[2048] = "", want[512] = "";
    for (int i = 0; i < 300; i++)
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", i ? "," : "",
                 (i * 37) % 1000);
    snprintf(args, sizeof args,
             "generate --model tiny-gemma3 --backend cpu --prompt-ids %s "
             "--max-new-tokens 6",
             ids);
    EXPECT_EQ_INT(run(args), 0);
    const char *g = strstr(out, "generated ids:");
    EXPECT(g != NULL);
    if (g) snprintf(want, sizeof want, "%.*s", (int)strcspn(g, "\n"), g);
    snprintf(args, sizeof args,
             "generate --model tiny-gemma3 --backend cpu --prompt-ids %s "
             "--max-new-tokens 6 --policy headwise --budget-tokens 1024",
             ids);
    EXPECT_EQ_INT(run(args), 0);
    EXPECT_STR_CONTAINS(out, want);
    EXPECT_STR_CONTAINS(out, "0 global-layer steps sparse");
    snprintf(args, sizeof args,
             "generate --model tiny-gemma3 --backend cpu --prompt-ids %s "
             "--max-new-tokens 6 --policy solohead-q --selector 2 --budget-tokens 32",
             ids);
    EXPECT_EQ_INT(run(args), 0);
    EXPECT_STR_CONTAINS(out, "(solohead-q, budget 32): 10 global-layer steps sparse, 0 dense");
    /* every diagnostic switch of the environment lands in the result's env (other PULSE_*
     * variables change nothing and are not recorded) */
    setenv("PULSE_WAIT_TIMEOUT_S", "77", 1);
    setenv("PULSE_TEST_SWITCH", "7", 1);
    EXPECT_EQ_INT(run("generate --model tiny --backend cpu --prompt-ids 3 --max-new-tokens 1 "
                      "--out /tmp/pulse_cli_env.json"),
                  0);
    unsetenv("PULSE_WAIT_TIMEOUT_S");
    unsetenv("PULSE_TEST_SWITCH");
    json_error_t je;
    json_t *r = json_load_file("/tmp/pulse_cli_env.json", 0, &je);
    json_t *vars = json_object_get(json_object_get(r, "env"), "pulse_variables");
    EXPECT_STR_CONTAINS(json_string_value(json_object_get(vars, "PULSE_WAIT_TIMEOUT_S")), "77");
    EXPECT(json_object_get(vars, "PULSE_TEST_SWITCH") == NULL);
    json_decref(r);
    unlink("/tmp/pulse_cli_env.json");
}

/* recall-bench --cap-unit / --cap-burst reach the engines and the JSON. */
static void test_recall_cap_flags(void)
{
    EXPECT_EQ_INT(run("recall-bench --backend cpu --engines zero-copy --sizes 8K --counts 64 "
                      "--reps 1 --warmup 0 --caps 0.4 --cap-chunk 8K --cap-count 64 "
                      "--no-interference --peak-bytes 1M --cap-unit 64K --cap-burst 128K "
                      "--out /tmp/pulse_cli_rb.json"),
                  0);
    json_error_t je;
    json_t *r = json_load_file("/tmp/pulse_cli_rb.json", 0, &je);
    json_t *c = json_object_get(r, "config");
    EXPECT_EQ_INT(json_integer_value(json_object_get(c, "cap_unit_bytes")), 65536);
    EXPECT_EQ_INT(json_integer_value(json_object_get(c, "cap_burst_bytes")), 131072);
    json_decref(r);
    unlink("/tmp/pulse_cli_rb.json");
}

int main(void)
{
    test_bad_inputs();
    test_outputs();
    test_env_junk();
    test_env_refused();
    test_long_values();
    test_bench_peer();
    test_options_pass_through();
    test_oom_result();
    test_help();
    test_models();
    test_generate_sparse();
    test_recall_cap_flags();
    test_good_run();
    return tu_finish("test_cli");
}
