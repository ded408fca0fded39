/* config.json of a Hugging Face checkpoint: see safetensors.h. Every field is type-checked
 * here; what a value means, and which values are refused, is the loader's (model_load.c). */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "safetensors.h"

#define MAX_CONFIG_FILE (64u << 20) /* a config.json larger than this is refused */

#define set_err(err, errlen, code, label, ...)                                                     \
    pulse_errorf((err), (errlen), (code), (label) ? (label) : "(config)", __VA_ARGS__)

/* A positive int field (named pre + key in messages); absent or null gives `def` (or an error
 * when def < 0: required). */
static int cfg_int(const json_t *o, const char *pre, const char *key, int def, int *out,
                   const char *label, char *err, size_t errlen)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (def < 0)
            return set_err(err, errlen, PULSE_ERR_INVALID, label, "missing \"%s%s\"", pre, key);
        *out = def;
        return PULSE_OK;
    }
    if (!json_is_integer(v))
        return set_err(err, errlen, PULSE_ERR_INVALID, label, "\"%s%s\" must be an integer", pre,
                       key);
    json_int_t x = json_integer_value(v);
    if (x < 1 || x > INT_MAX)
        return set_err(err, errlen, PULSE_ERR_INVALID, label,
                       "\"%s%s\" = %lld is out of range (1 .. %d)", pre, key, (long long)x,
                       INT_MAX);
    *out = (int)x;
    return PULSE_OK;
}

/* A positive finite number field; absent or null gives `def`. */
static int cfg_num(const json_t *o, const char *pre, const char *key, double def, double *out,
                   const char *label, char *err, size_t errlen)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return PULSE_OK;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0) || !isfinite(json_number_value(v)))
        return set_err(err, errlen, PULSE_ERR_INVALID, label, "\"%s%s\" must be a positive number",
                       pre, key);
    *out = json_number_value(v);
    return PULSE_OK;
}

/* A true/false field; absent or null gives `def`. */
static int cfg_bool(const json_t *v, const char *key, int def, int *out, const char *label,
                    char *err, size_t errlen)
{
    if (!v || json_is_null(v)) {
        *out = def;
        return PULSE_OK;
    }
    if (!json_is_boolean(v))
        return set_err(err, errlen, PULSE_ERR_INVALID, label, "\"%s\" must be true or false", key);
    *out = json_is_true(v);
    return PULSE_OK;
}

/* A string field into buf[len]; absent or null leaves buf as it is. */
static int cfg_str(const json_t *v, const char *pre, const char *key, char *buf, size_t len,
                   const char *label, char *err, size_t errlen)
{
    if (!v || json_is_null(v)) return PULSE_OK;
    if (!json_is_string(v))
        return set_err(err, errlen, PULSE_ERR_INVALID, label, "\"%s%s\" must be a string", pre,
                       key);
    if (strlen(json_string_value(v)) >= len)
        return set_err(err, errlen, PULSE_ERR_INVALID, label, "\"%s%s\" is too long", pre, key);
    strcpy(buf, json_string_value(v));
    return PULSE_OK;
}

/* RoPE: the scaling object (rope_scaling or rope_parameters), and the base from it or the top
 * level. */
static int cfg_rope(const json_t *o, struct safetensors_config *c, const char *label, char *err,
                    size_t errlen)
{
    const json_t *rs = json_object_get(o, "rope_scaling"),
                 *rp = json_object_get(o, "rope_parameters");
    if (rs && json_is_null(rs)) rs = NULL;
    if (rp && json_is_null(rp)) rp = NULL;
    if (rs && rp)
        return set_err(err, errlen, PULSE_ERR_INVALID, label,
                       "both \"rope_scaling\" and \"rope_parameters\" are set: give one");
    const json_t *d = rs ? rs : rp;
    double top_theta = 0.0, theta = 0.0;
    int rc = cfg_num(o, "", "rope_theta", 0.0, &top_theta, label, err, errlen);
    if (rc) return rc;
    strcpy(c->rope_type, "default");
    if (d) {
        snprintf(c->rope_field, sizeof c->rope_field, "%s",
                 rs ? "rope_scaling" : "rope_parameters");
        if (!json_is_object(d))
            return set_err(err, errlen, PULSE_ERR_INVALID, label,
                           "\"%s\" must be an object or null", c->rope_field);
        char pre[32], type2[32] = "";
        snprintf(pre, sizeof pre, "%s.", c->rope_field);
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)d, key, v)
        {
            if (!strcmp(key, "rope_type"))
                rc = cfg_str(v, pre, key, c->rope_type, sizeof c->rope_type, label, err, errlen);
            else if (!strcmp(key, "type"))
                rc = cfg_str(v, pre, key, type2, sizeof type2, label, err, errlen);
            else if (!strcmp(key, "factor"))
                rc = cfg_num(d, pre, key, 0.0, &c->rope_factor, label, err, errlen);
            else if (!strcmp(key, "low_freq_factor"))
                rc = cfg_num(d, pre, key, 0.0, &c->rope_low_freq_factor, label, err, errlen);
            else if (!strcmp(key, "high_freq_factor"))
                rc = cfg_num(d, pre, key, 0.0, &c->rope_high_freq_factor, label, err, errlen);
            else if (!strcmp(key, "original_max_position_embeddings"))
                rc = cfg_int(d, pre, key, 0, &c->rope_original_max_pos, label, err, errlen);
            else if (!strcmp(key, "rope_theta"))
                rc = cfg_num(d, pre, key, 0.0, &theta, label, err, errlen);
            else if (!strcmp(key, "partial_rotary_factor"))
                rc = cfg_num(d, pre, key, 1.0, &c->partial_rotary_factor, label, err, errlen);
            else if (!c->rope_unknown[0])
                snprintf(c->rope_unknown, sizeof c->rope_unknown, "%.47s", key);
            if (rc) return rc;
        }
        if (type2[0] && json_object_get(d, "rope_type") && strcmp(type2, c->rope_type))
            return set_err(err, errlen, PULSE_ERR_INVALID, label,
                           "\"%srope_type\" '%s' and \"%stype\" '%s' differ", pre, c->rope_type,
                           pre, type2);
        if (type2[0]) strcpy(c->rope_type, type2);
    }
    if (theta > 0 && top_theta > 0 && theta != top_theta)
        return set_err(err, errlen, PULSE_ERR_INVALID, label,
                       "\"rope_theta\" %g and \"%s.rope_theta\" %g differ", top_theta,
                       c->rope_field, theta);
    c->rope_theta = theta > 0 ? theta : top_theta > 0 ? top_theta : 10000.0;
    return PULSE_OK;
}

/* The fields that change the model beyond its shapes. */
static int cfg_behaviour(const json_t *o, const json_t *root, struct safetensors_config *c,
                         const char *label, char *err, size_t errlen)
{
    const json_t *v = json_object_get(o, "tie_word_embeddings");
    if (!v) v = json_object_get(root, "tie_word_embeddings");
    int rc;
    if ((rc = cfg_bool(v, "tie_word_embeddings", !strncmp(c->model_type, "gemma", 5),
                       &c->tie_word_embeddings, label, err, errlen)) ||
        (rc = cfg_str(json_object_get(o, "hidden_act"), "", "hidden_act", c->hidden_act,
                      sizeof c->hidden_act, label, err, errlen)) ||
        (rc = cfg_bool(json_object_get(o, "attention_bias"), "attention_bias", 0,
                       &c->attention_bias, label, err, errlen)) ||
        (rc = cfg_bool(json_object_get(o, "mlp_bias"), "mlp_bias", 0, &c->mlp_bias, label, err,
                       errlen)) ||
        (rc = cfg_bool(json_object_get(o, "use_sliding_window"), "use_sliding_window", 0,
                       &c->use_sliding_window, label, err, errlen)) ||
        (rc = cfg_num(o, "", "partial_rotary_factor", 1.0, &c->partial_rotary_factor, label, err,
                      errlen)))
        return rc;
    v = json_object_get(o, "layer_types");
    if (v && !json_is_null(v)) {
        if (!json_is_array(v))
            return set_err(err, errlen, PULSE_ERR_INVALID, label,
                           "\"layer_types\" must be an array of strings");
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e)
        {
            if (!json_is_string(e))
                return set_err(err, errlen, PULSE_ERR_INVALID, label,
                               "\"layer_types\" must be an array of strings");
            c->sliding_layers += strcmp(json_string_value(e), "full_attention") != 0;
        }
    }
    v = json_object_get(o, "quantization_config");
    if (!v) v = json_object_get(root, "quantization_config");
    c->quantized = v && !json_is_null(v);
    return cfg_rope(o, c, label, err, errlen);
}

static int cfg_fields(const json_t *root, struct safetensors_config *c, const char *label,
                      char *err, size_t errlen)
{
    const json_t *o = root, *tc = json_object_get(root, "text_config"), *v;
    if (!json_object_get(root, "hidden_size") && json_is_object(tc)) o = tc;
    memset(c, 0, sizeof *c);
    v = json_object_get(o, "model_type");
    if (!v) v = json_object_get(root, "model_type");
    int rc = cfg_str(v, "", "model_type", c->model_type, sizeof c->model_type, label, err, errlen);
    if (rc) return rc;
    if ((rc = cfg_int(o, "", "hidden_size", -1, &c->hidden_size, label, err, errlen)) ||
        (rc = cfg_int(o, "", "num_hidden_layers", -1, &c->num_hidden_layers, label, err, errlen)) ||
        (rc = cfg_int(o, "", "num_attention_heads", -1, &c->num_attention_heads, label, err,
                      errlen)) ||
        (rc = cfg_int(o, "", "intermediate_size", -1, &c->intermediate_size, label, err, errlen)) ||
        (rc = cfg_int(o, "", "vocab_size", -1, &c->vocab_size, label, err, errlen)) ||
        (rc = cfg_int(o, "", "num_key_value_heads", c->num_attention_heads, &c->num_key_value_heads,
                      label, err, errlen)))
        return rc;
    if (c->num_attention_heads % c->num_key_value_heads)
        return set_err(err, errlen, PULSE_ERR_INVALID, label,
                       "num_attention_heads %d is not a multiple of num_key_value_heads %d",
                       c->num_attention_heads, c->num_key_value_heads);
    v = json_object_get(o, "head_dim");
    if ((!v || json_is_null(v)) && c->hidden_size % c->num_attention_heads)
        return set_err(err, errlen, PULSE_ERR_INVALID, label,
                       "no \"head_dim\", and hidden_size %d is not a multiple of "
                       "num_attention_heads %d",
                       c->hidden_size, c->num_attention_heads);
    if ((rc = cfg_int(o, "", "head_dim", c->hidden_size / c->num_attention_heads, &c->head_dim,
                      label, err, errlen)) ||
        (rc = cfg_num(o, "", "rms_norm_eps", 1e-6, &c->rms_norm_eps, label, err, errlen)))
        return rc;
    return cfg_behaviour(o, root, c, label, err, errlen);
}

int safetensors_parse_config(const char *text, size_t len, const char *label,
                             struct safetensors_config *cfg, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(text ? text : "", text ? len : 0, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return set_err(err, errlen, PULSE_ERR_INVALID, label, "bad JSON: %s (line %d, column %d)",
                       je.text, je.line, je.column);
    int rc = json_is_object(root)
                 ? cfg_fields(root, cfg, label, err, errlen)
                 : set_err(err, errlen, PULSE_ERR_INVALID, label, "config is not a JSON object");
    json_decref(root);
    return rc;
}

int safetensors_read_config(const char *path, struct safetensors_config *cfg, char *err,
                            size_t errlen)
{
    struct stat s;
    const int dir = stat(path, &s) == 0 && S_ISDIR(s.st_mode);
    const size_t n = strlen(path) + sizeof "/config.json";
    char *file = malloc(n), *text = NULL;
    size_t len = 0;
    if (!file) return set_err(err, errlen, PULSE_ERR_NOMEM, path, "out of memory");
    snprintf(file, n, dir ? "%s/config.json" : "%s", path);
    int rc = pulse_check_regular(file, "config.json", err, errlen);
    if (rc == PULSE_OK && stat(file, &s) == 0 && (uint64_t)s.st_size > MAX_CONFIG_FILE)
        rc = set_err(err, errlen, PULSE_ERR_INVALID, file,
                     "%lld bytes is too large for a JSON file", (long long)s.st_size);
    if (rc == PULSE_OK) rc = pulse_read_file(file, "config.json", &text, &len, err, errlen);
    if (rc == PULSE_OK) rc = safetensors_parse_config(text, len, file, cfg, err, errlen);
    free(text);
    free(file);
    return rc;
}
