/* pulse sweep (experiments/sweep.c): a small grid (a policy axis, a number axis, a switch axis
 * with false and true) runs one pulse run per point in one process and writes one result file
 * per point, named by its values; killed midway (SIGKILL after the first file) and started
 * again it runs only the missing points; a point's file that is a failed point's stub, not
 * JSON, or the result of another command line is run again, never counted done; two points of
 * one file name refuse the grid before anything runs; --dry-run prints the command lines; bad
 * grids are one-line errors (exit 2). */
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "testutil.h"

static char out[1 << 16];

static int count_json(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        const size_t l = strlen(e->d_name);
        n += l > 5 && !strcmp(e->d_name + l - 5, ".json");
    }
    if (d) closedir(d);
    return n;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    EXPECT(f != NULL);
    if (f) fputs(text, f), fclose(f);
}

int main(void)
{
    char dir[] = "/tmp/pulse_sweep_XXXXXX", grid[128], cmd[512], path[512];
    EXPECT(mkdtemp(dir) != NULL);
    snprintf(grid, sizeof grid, "%s/grid.json", dir);
    char text[1024];
    snprintf(text, sizeof text,
             "{\"out_dir\": \"%s/out\", \"base\": {\"--backend\": \"cpu\", \"--model\": \"tiny\", "
             "\"--workload\": \"lengths:300,170,90\", \"--output-len\": 3, \"--policy\": "
             "\"pulseinfer\", \"--admission\": \"fixed:200\"}, \"axes\": {\"--budget-tokens\": "
             "[32, 64], \"--recall-engine\": [\"gather-scatter\", \"per-block\"], \"--no-irq\": "
             "[false, true]}}",
             dir);
    write_file(grid, text);
    char outdir[256];
    snprintf(outdir, sizeof outdir, "%s/out", dir);
    /* --dry-run: eight command lines, the switch only where true */
    snprintf(cmd, sizeof cmd, "sweep %s --dry-run", grid);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    int lines = 0, irq_off = 0;
    for (char *p = out; (p = strstr(p, "pulse run ")); p++)
        lines++;
    for (char *p = out; (p = strstr(p, " --no-irq ")); p++)
        irq_off++;
    EXPECT_EQ_INT(lines, 8);
    EXPECT_EQ_INT(irq_off, 4);
    /* killed after its first file, then started again: only the missing points run */
    const char *bin = getenv("PULSE_BIN");
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(9);
        execl(bin ? bin : "./build/pulse", "pulse", "sweep", grid, (char *)NULL);
        _exit(9);
    }
    for (int i = 0; i < 3000 && count_json(outdir) < 1; i++)
        usleep(10000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    const int before = count_json(outdir);
    EXPECT(before >= 1);
    snprintf(cmd, sizeof cmd, "sweep %s", grid);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    char want[128];
    snprintf(want, sizeof want, "8 points: %d ran, %d skipped (done", 8 - before, before);
    EXPECT_STR_CONTAINS(out, want);
    EXPECT_EQ_INT(count_json(outdir), 8);
    /* each file is its point's run */
    snprintf(path, sizeof path, "%s/budget-tokens=64,recall-engine=per-block,no-irq=true.json",
             outdir);
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    EXPECT(r != NULL);
    if (r) {
        json_t *off = json_object_get(json_object_get(r, "config"), "offload");
        EXPECT_EQ_INT(json_integer_value(json_object_get(off, "budget_tokens")), 64);
        EXPECT(!strcmp(json_string_value(json_object_get(off, "recall_engine")), "per-block"));
        EXPECT(!strcmp(json_string_value(json_object_get(r, "status")), "ok"));
        EXPECT_EQ_INT(
            json_integer_value(json_object_get(
                json_object_get(json_object_get(r, "counters"), "schedule"), "layer_switches")),
            0); /* --no-irq */
        json_decref(r);
    }
    /* a third run has nothing left to do */
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    EXPECT_STR_CONTAINS(out, "8 points: 0 ran, 8 skipped");
    /* what is not a point's ok result is run again: a failed point's stub, a file that is not
     * JSON, another point's result under this one's name */
    char p1[512], p2[512], p3[512], other[1100];
    snprintf(p1, sizeof p1, "%s/budget-tokens=32,recall-engine=per-block,no-irq=false.json",
             outdir);
    snprintf(p2, sizeof p2, "%s/budget-tokens=32,recall-engine=per-block,no-irq=true.json",
             outdir);
    snprintf(p3, sizeof p3, "%s/budget-tokens=64,recall-engine=gather-scatter,no-irq=true.json",
             outdir);
    snprintf(other, sizeof other, "cp %s %s", path, p3);
    write_file(p1, "{\"status\": \"error\", \"error\": \"out of luck\"}");
    write_file(p2, "{\"status\": \"ok\", trunc");
    EXPECT_EQ_INT(system(other), 0);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
    EXPECT_STR_CONTAINS(out, "8 points: 3 ran, 5 skipped");
    EXPECT_STR_CONTAINS(out, "run again, its status is error");
    EXPECT_STR_CONTAINS(out, "run again, unreadable");
    EXPECT_STR_CONTAINS(out, "run again, it is the result of another command line");
    r = json_load_file(p3, 0, &je);
    EXPECT(r && !strcmp(json_string_value(json_object_get(
                            json_object_get(json_object_get(r, "config"), "offload"),
                            "recall_engine")),
                        "gather-scatter"));
    json_decref(r);
    /* two shards (--shard 0/2, 1/2) into another out_dir give the points one run gave: the same
     * files, the same tokens; each shard runs its half and lists the others' */
    char sharded[512];
    snprintf(sharded, sizeof sharded, "%s/sharded", dir);
    char *t2 = strstr(text, "/out\"");
    EXPECT(t2 != NULL);
    if (t2) {
        char text2[1200];
        snprintf(text2, sizeof text2, "%.*s/sharded%s", (int)(t2 - text), text, t2 + 4);
        write_file(grid, text2);
        for (int s = 0; s < 2; s++) {
            snprintf(cmd, sizeof cmd, "sweep %s --shard %d/2", grid, s);
            EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 0);
            EXPECT_STR_CONTAINS(out, "4 ran");
            EXPECT_STR_CONTAINS(out, "4 of the other 1 shards");
        }
        EXPECT_EQ_INT(count_json(sharded), 8);
        DIR *d = opendir(outdir);
        int same = 0;
        for (struct dirent *e; d && (e = readdir(d));) {
            if (!strstr(e->d_name, ".json")) continue;
            char a[1024], b[1024];
            snprintf(a, sizeof a, "%s/%s", outdir, e->d_name);
            snprintf(b, sizeof b, "%s/%s", sharded, e->d_name);
            json_t *ja = json_load_file(a, 0, &je), *jb = json_load_file(b, 0, &je);
            const char *ta = json_string_value(
                json_object_get(json_object_get(ja, "metrics"), "output_tokens_fnv1a"));
            const char *tb = json_string_value(
                json_object_get(json_object_get(jb, "metrics"), "output_tokens_fnv1a"));
            same += ta && tb && !strcmp(ta, tb);
            json_decref(ja);
            json_decref(jb);
        }
        if (d) closedir(d);
        EXPECT_EQ_INT(same, 8);
        snprintf(cmd, sizeof cmd, "sweep %s --shard 2/2", grid);
        EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
        EXPECT_STR_CONTAINS(out, "--shard: '2/2' is not I/N");
    }
    snprintf(cmd, sizeof cmd, "sweep %s", grid);
    /* two points of one file name ('a b' and 'a_b' fold alike): refused, nothing run */
    snprintf(text, sizeof text,
             "{\"out_dir\": \"%s/clash\", \"base\": {\"--backend\": \"cpu\"}, \"variants\": "
             "[{\"name\": \"a b\", \"--seed\": 1}, {\"name\": \"a_b\", \"--seed\": 2}]}",
             dir);
    write_file(grid, text);
    EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
    EXPECT_STR_CONTAINS(out, "points 1 and 2 would both write a_b.json");
    snprintf(path, sizeof path, "%s/clash", dir);
    EXPECT_EQ_INT(count_json(path), 0);
    /* bad grids */
    struct {
        const char *text, *msg;
    } bad[] = {{"{\"axes\": {\"--policy\": [\"arkvale\"]}}", "expected {\"out_dir\": DIR"},
               {"{\"out_dir\": \"/tmp/x\", \"axes\": {\"--policy\": \"arkvale\"}}",
                "axes: --policy: expected a non-empty array"},
               {"{\"out_dir\": \"/tmp/x\", \"axes\": {\"policy\": [\"arkvale\"]}}",
                "'policy' is not a pulse run flag"},
               {"{\"out_dir\": \"/tmp/x\", \"base\": {\"--out\": \"a.json\"}, \"axes\": "
                "{\"--policy\": [\"arkvale\"]}}",
                "'--out' is not a pulse run flag"},
               {"{\"out_dir\": \"/tmp/x\", \"base\": {\"--policy\": \"vanilla\"}, \"axes\": "
                "{\"--policy\": [\"arkvale\"]}}",
                "--policy is both in base and an axis"},
               {"{\"out_dir\": \"/tmp/x\", \"axes\": {\"--seed\": [[1]]}}",
                "axes: --seed[0]: a value is a string"}};
    for (size_t i = 0; i < PULSE_ARRAY_LEN(bad); i++) {
        write_file(grid, bad[i].text);
        EXPECT_EQ_INT(tu_run_pulse(cmd, out, sizeof out), 2);
        EXPECT_STR_CONTAINS(out, bad[i].msg);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    EXPECT_EQ_INT(system(cmd), 0);
    return tu_finish("test_sweep");
}
