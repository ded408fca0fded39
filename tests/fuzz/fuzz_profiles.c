/* libFuzzer harness for the profile readers: input byte 0 picks the reader, the rest is the
 * file's bytes:
 *   0: the IOAA profile (runtime/sched/ioaa_profile.h, `pulse profile`'s JSON, `pulse run --profile`)
 *   1: the locality profile (workloads/locality.h, `--locality-profile`)
 *   2: the MAM head profile (runtime/select/mam.h, `--head-profile`; read from a file, as pulse does)
 * A refusal must explain itself (a message naming the input); an accepted profile must survive
 * its writer and reader again unchanged in shape (IOAA, locality) or be in range (MAM).
 * Build: cmake -DPULSE_FUZZ=ON -DCMAKE_C_COMPILER=clang; run: ./fuzz_profiles -max_total_time=30.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "ioaa_profile.h"
#include "mam.h"
#include "workloads/locality.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void ioaa_case(const json_t *j)
{
    struct ioaa_profile_data d, e;
    memset(&d, 0, sizeof d);
    memset(&e, 0, sizeof e);
    char err[512] = "";
    if (ioaa_profile_from_json(j, "fuzz", &d, err, sizeof err) != PULSE_OK) {
        if (!strstr(err, "fuzz")) abort();
        return;
    }
    json_t *back = ioaa_profile_to_json(&d.prof, &d.info);
    if (!back || ioaa_profile_from_json(back, "again", &e, err, sizeof err) != PULSE_OK) abort();
    if (e.prof.to_n != d.prof.to_n || e.prof.tr_n != d.prof.tr_n || e.prof.tn_nb != d.prof.tn_nb)
        abort();
    json_decref(back);
    ioaa_profile_data_free(&e);
    ioaa_profile_data_free(&d);
}

static void locality_case(const json_t *j)
{
    static struct locality_profile p, q; /* large: not on the stack */
    char err[512] = "";
    if (locality_profile_from_json(j, "fuzz", &p, err, sizeof err) != PULSE_OK) {
        if (!strstr(err, "fuzz")) abort();
        return;
    }
    json_t *back = locality_profile_to_json(&p);
    if (!back || locality_profile_from_json(back, "again", &q, err, sizeof err) != PULSE_OK)
        abort();
    if (q.n_layers != p.n_layers || q.n_levels != p.n_levels) abort();
    json_decref(back);
}

static void mam_case(const uint8_t *data, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz_mam_%d.json", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (size) fwrite(data, 1, size, f);
    fclose(f);
    struct mam_profile p;
    char err[512] = "";
    if (mam_profile_read(path, NULL, &p, err, sizeof err) != PULSE_OK) {
        if (!strstr(err, path)) abort();
    } else {
        for (int l = 0; l < p.n_layers; l++)
            for (int h = 0; h < p.n_kv_heads; h++) {
                const double v = p.mam[(size_t)l * p.n_kv_heads + h];
                if (!(v >= 0.0 && v <= 1.0)) abort();
            }
        mam_profile_free(&p);
    }
    remove(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const int which = data[0] % 3;
    data++, size--;
    if (which == 2) {
        mam_case(data, size);
        return 0;
    }
    json_error_t je;
    json_t *j = json_loadb((const char *)data, size, 0, &je);
    if (!j) return 0;
    if (which == 0)
        ioaa_case(j);
    else
        locality_case(j);
    json_decref(j);
    return 0;
}
