/* The policies by name (every policy's table is in baselines/). */
#ifndef PULSE_REGISTRY_H
#define PULSE_REGISTRY_H

#include "serve.h"

/* The policy registered under `name`, or NULL; names for messages. */
const struct policy *policy_find(const char *name);
const char *policy_names(void);

#endif
