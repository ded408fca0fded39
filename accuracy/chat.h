/* Chat templates of the instruction-tuned models the accuracy table runs, applied to a prompt
 * as LongBench's pred.py does for its chat tasks (the task's `chat` flag): the user turn holding
 * the prompt, then the start of the model's turn. Written out here rather than run from the
 * GGUF's Jinja `tokenizer.chat_template`, for one user turn:
 *   gemma    "<start_of_turn>user\n" PROMPT "<end_of_turn>\n<start_of_turn>model\n" (Gemma 3)
 *   chatml   "<|im_start|>user\n" PROMPT "<|im_end|>\n<|im_start|>assistant\n" (Qwen)
 * The tokenizer turns the markers into their control ids and adds BOS itself. */
#ifndef PULSE_CHAT_H
#define PULSE_CHAT_H

#include "accuracy/tokenizer.h"

enum chat_template { CHAT_NONE = 0, CHAT_GEMMA, CHAT_CHATML, CHAT_TEMPLATES };

/* "none", "gemma", "chatml". */
const char *chat_template_name(enum chat_template c);
/* Parses "auto" (-> -1), "none", "gemma" or "chatml" into *out; -1 for anything else. */
int chat_template_parse(const char *s, int *out);
/* The template whose markers are control pieces of t's vocabulary (gemma before chatml), else
 * CHAT_NONE. */
enum chat_template chat_template_detect(const struct tokenizer *t);
/* The prompt in template c (a malloc'd copy for CHAT_NONE); NULL when out of memory. */
char *chat_apply(enum chat_template c, const char *prompt);

#endif
