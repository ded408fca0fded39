/* The registry of policies by name. */
#include <string.h>

#include "common.h"
#include "serve.h"

extern const struct policy policy_vanilla;   /* baselines/vanilla.c */
extern const struct policy policy_arkvale;   /* baselines/arkvale.c */
extern const struct policy policy_infinigen; /* baselines/infinigen.c */

static const struct policy *const registry[] = {&policy_vanilla, &policy_arkvale,
                                                &policy_infinigen};

const struct policy *policy_find(const char *name)
{
    for (size_t i = 0; i < PULSE_ARRAY_LEN(registry); i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

const char *policy_names(void)
{
    return "vanilla, arkvale, infinigen";
}
