/* The one JSON writer (results_write_json): a regular file is replaced through a temporary file;
 * what is not a regular file is written through and never replaced (a symbolic link stays a
 * link and its target gets the JSON; /dev/null stays a device); /dev/full and a directory are
 * errors with a reason, and a FIFO with no reader is one at once (never a blocked open);
 * `pulse run --out` goes through it. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "results.h"
#include "testutil.h"

static json_t *sample(void)
{
    return json_pack("{s:s, s:i, s:[i,i,i]}", "name", "pulse", "answer", 42, "list", 3, 1, 4);
}

static int reads_back(const char *path)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    const int ok = j && json_integer_value(json_object_get(j, "answer")) == 42;
    json_decref(j);
    return ok;
}

int main(void)
{
    char err[512], dir[] = "/tmp/pulse_rw_XXXXXX", file[600], link[600], sub[600];
    EXPECT(mkdtemp(dir) != NULL);
    snprintf(file, sizeof file, "%s/out.json", dir);
    snprintf(link, sizeof link, "%s/link.json", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    json_t *j = sample();

    /* a new file, then replacing it */
    EXPECT_EQ_INT(results_write(j, file, err, sizeof err), PULSE_OK);
    EXPECT(reads_back(file));
    EXPECT_EQ_INT(results_write_exact(j, file, err, sizeof err), PULSE_OK);
    EXPECT(reads_back(file));

    /* a symbolic link: written through to its target, the link kept */
    EXPECT_EQ_INT(symlink(file, link), 0);
    remove(file);
    EXPECT_EQ_INT(results_write(j, link, err, sizeof err), PULSE_OK);
    struct stat st;
    EXPECT(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    EXPECT(reads_back(file));

    /* a directory: refused */
    EXPECT_EQ_INT(mkdir(sub, 0700), 0);
    EXPECT_EQ_INT(results_write(j, sub, err, sizeof err), PULSE_ERR_IO);
    EXPECT(strstr(err, "is a directory") != NULL);
    EXPECT(stat(sub, &st) == 0 && S_ISDIR(st.st_mode));

    /* a missing directory: a reason */
    char missing[700];
    snprintf(missing, sizeof missing, "%s/no/such/dir.json", dir);
    EXPECT_EQ_INT(results_write(j, missing, err, sizeof err), PULSE_ERR_IO);
    EXPECT(strstr(err, "no/such") != NULL);

    /* devices: /dev/null stays a device, /dev/full fails */
    if (access("/dev/null", W_OK) == 0) {
        EXPECT_EQ_INT(results_write(j, "/dev/null", err, sizeof err), PULSE_OK);
        EXPECT(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    }
    if (access("/dev/full", W_OK) == 0) {
        EXPECT_EQ_INT(results_write(j, "/dev/full", err, sizeof err), PULSE_ERR_IO);
        EXPECT(strstr(err, "/dev/full") != NULL);
        EXPECT(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode));
    }

    /* a FIFO: with no reader, an error at once (not a blocked open); with one, written through */
    char fifo[512];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    EXPECT_EQ_INT(mkfifo(fifo, 0600), 0);
    EXPECT_EQ_INT(results_write(j, fifo, err, sizeof err), PULSE_ERR_IO);
    EXPECT_STR_CONTAINS(err, "a FIFO with no reader");
    const pid_t pid = fork();
    if (pid == 0) { /* the reader: counts what comes */
        FILE *r = fopen(fifo, "r");
        int n = 0;
        while (r && fgetc(r) != EOF)
            n++;
        _exit(n > 10 ? 0 : 1);
    }
    int status = -1, tries = 0;
    int rc = PULSE_ERR_IO;
    while (rc != PULSE_OK && tries++ < 200) { /* until the reader has opened its end */
        rc = results_write(j, fifo, err, sizeof err);
        if (rc != PULSE_OK) usleep(10000);
    }
    EXPECT_EQ_INT(rc, PULSE_OK);
    EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT(stat(fifo, &st) == 0 && S_ISFIFO(st.st_mode)); /* still a FIFO */
    remove(fifo);

    /* through pulse run */
    static char out[1 << 14];
    EXPECT_EQ_INT(tu_run_pulse("run --backend cpu --workload uniform:32:1 --output-len 2 --out "
                               "/dev/null",
                               out, sizeof out),
                  0);
    EXPECT(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    if (access("/dev/full", W_OK) == 0) {
        EXPECT_EQ_INT(tu_run_pulse("run --backend cpu --workload uniform:32:1 --output-len 2 "
                                   "--out /dev/full",
                                   out, sizeof out),
                      1);
        EXPECT(strstr(out, "/dev/full") != NULL);
    }

    json_decref(j);
    remove(link);
    remove(file);
    rmdir(sub);
    rmdir(dir);
    return tu_finish("test_results_write");
}
