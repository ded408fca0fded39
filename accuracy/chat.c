/* Chat templates (chat.h). */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name, *open, *close, *markers[2];
} templates[CHAT_TEMPLATES] = {
    [CHAT_NONE] = {"none", "", "", {NULL, NULL}},
    [CHAT_GEMMA] = {"gemma",
                    "<start_of_turn>user\n",
                    "<end_of_turn>\n<start_of_turn>model\n",
                    {"<start_of_turn>", "<end_of_turn>"}},
    [CHAT_CHATML] = {"chatml",
                     "<|im_start|>user\n",
                     "<|im_end|>\n<|im_start|>assistant\n",
                     {"<|im_start|>", "<|im_end|>"}},
};

const char *chat_template_name(enum chat_template c)
{
    return c >= 0 && c < CHAT_TEMPLATES ? templates[c].name : "?";
}

int chat_template_parse(const char *s, int *out)
{
    if (!strcmp(s, "auto")) return *out = -1, 0;
    for (int c = 0; c < CHAT_TEMPLATES; c++)
        if (!strcmp(s, templates[c].name)) return *out = c, 0;
    return -1;
}

enum chat_template chat_template_detect(const struct tokenizer *t)
{
    for (int c = CHAT_GEMMA; c < CHAT_TEMPLATES; c++) {
        int ok = 1;
        for (int k = 0; k < 2; k++) {
            const char *m = templates[c].markers[k];
            const int32_t id = tokenizer_find(t, m, strlen(m));
            ok &= id >= 0 && tokenizer_token_type(t, id) == TOKENIZER_CONTROL;
        }
        if (ok) return (enum chat_template)c;
    }
    return CHAT_NONE;
}

char *chat_apply(enum chat_template c, const char *prompt)
{
    const char *a = templates[c].open, *b = templates[c].close;
    const size_t la = strlen(a), lp = strlen(prompt), lb = strlen(b);
    char *s = malloc(la + lp + lb + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, prompt, lp);
    memcpy(s + la + lp, b, lb + 1);
    return s;
}
