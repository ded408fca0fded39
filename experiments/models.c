/* pulse models: the built-in configs with parameter count, weight bytes and KV bytes/token. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "results.h"

static const char usage[] = "usage: pulse models [--json]\n"
                            "  Lists the built-in model configs: shapes, parameters, bf16 weight\n"
                            "  bytes and KV-cache bytes per token (all layers, K and V, bf16).\n"
                            "  --json   print a JSON array instead of a table\n";

int cmd_models(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int as_json = 0, c;
    opterr = 0;
    optind = 1;
    struct cli_seen seen = {0};
    while ((c = cli_getopt("models", argc, argv, opts, &seen)) != -1) {
        if (c == 'h') {
            fputs(usage, stdout);
            return 0;
        }
        if (c == 'j') {
            as_json = 1;
            continue;
        }
        cli_unknown_flag("models", argc, argv);
        return EXIT_USAGE;
    }
    if (cli_no_extra_args("models", argc, argv)) return EXIT_USAGE;
    json_t *arr = json_array();
    if (!as_json)
        printf("%-14s %6s %6s %5s %4s %5s %6s %7s %10s %9s %12s\n", "model", "layers", "hidden",
               "heads", "kv", "hdim", "ffn", "vocab", "params", "weights", "KV/token");
    for (int i = 0; model_config_at(i); i++) {
        const struct model_config *m = model_config_at(i);
        uint64_t params = model_param_count(m), wb = model_weight_bytes(m),
                 kvb = model_kv_bytes_per_token(m);
        if (as_json) {
            json_t *o = json_pack(
                "{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:b,s:I,s:I,s:I}", "name", m->name, "layers",
                m->n_layers, "hidden", m->hidden, "heads", m->n_heads, "kv_heads", m->n_kv_heads,
                "head_dim", m->head_dim, "ffn", m->ffn, "vocab", m->vocab, "qk_norm", m->qk_norm,
                "params", (json_int_t)params, "weight_bytes", (json_int_t)wb, "kv_bytes_per_token",
                (json_int_t)kvb);
            json_object_set_new(o, "arch",
                                json_string(m->arch == MODEL_ARCH_GEMMA3 ? "gemma3" : "llama"));
            json_object_set_new(o, "sliding_window", json_integer(m->sliding_window));
            json_object_set_new(o, "global_layers", json_integer(model_n_global_layers(m)));
            json_object_set_new(o, "rope_scaling", json_string(model_rope_type_name(m->rope.type)));
            json_array_append_new(arr, o);
        } else {
            printf("%-14s %6d %6d %5d %4d %5d %6d %7d %9.3fB %7.2fGB %9.1fKiB\n", m->name,
                   m->n_layers, m->hidden, m->n_heads, m->n_kv_heads, m->head_dim, m->ffn, m->vocab,
                   params / 1e9, wb / 1e9, kvb / 1024.0);
        }
    }
    if (as_json) {
        char *s = json_dumps(arr, JSON_INDENT(2));
        puts(s);
        free(s);
    }
    json_decref(arr);
    return 0;
}
