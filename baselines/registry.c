/* The registry of policies by name (registry.h). */
#include "registry.h"

#include <string.h>

#include "common.h"

extern const struct policy policy_vanilla;   /* vanilla.c */
extern const struct policy policy_arkvale;   /* arkvale.c */
extern const struct policy policy_infinigen; /* infinigen.c */
extern const struct policy policy_pulseinfer; /* pulseinfer.c */
/* the engine-matched tier (DESIGN section 11) */
extern const struct policy policy_arkvale_solohead_gs, policy_arkvale_solohead_zc;
extern const struct policy policy_infinigen_solohead_gs, policy_infinigen_solohead_zc;

static const struct policy *const registry[] = {&policy_vanilla,
                                                &policy_arkvale,
                                                &policy_infinigen,
                                                &policy_pulseinfer,
                                                &policy_arkvale_solohead_gs,
                                                &policy_arkvale_solohead_zc,
                                                &policy_infinigen_solohead_gs,
                                                &policy_infinigen_solohead_zc};

const struct policy *policy_find(const char *name)
{
    for (size_t i = 0; i < PULSE_ARRAY_LEN(registry); i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

const char *policy_names(void)
{
    return "vanilla, arkvale, infinigen, pulseinfer, arkvale+solohead+gs, arkvale+solohead+zc, "
           "infinigen+solohead+gs, infinigen+solohead+zc";
}
