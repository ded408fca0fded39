/* The filler corpus of the synthetic long-context tasks (accuracy/synth.h): natural English
 * sentences taken from plain-text documents on disk, by default the ones Debian packages ship
 * (/usr/share/doc, /usr/share/common-licenses).
 *
 * Which files: every regular file under the given paths (directories walked recursively in
 * byte order of their names; symlinked directories are not entered, symlinked files are read)
 * whose name does not end in a compressed, markup, image or source-code extension (.gz, .xz,
 * .html, .png, .c, ... see synth_corpus.c), whose first 8 KiB hold no NUL and at most 2% control
 * bytes, at most 1 MiB read per file. Compressed docs (*.gz) are skipped and counted: pulse does
 * not link zlib.
 *
 * Cleaning: lines are trimmed; a line with fewer than 2 letters or where letters are under half
 * of its non-blank characters ("-----", "| x | y |") is dropped and ends the paragraph, as does
 * a blank line; the lines of a paragraph are joined with whitespace collapsed to one space; the
 * paragraph is cut at sentence ends ('.', '!' or '?', optionally followed by a quote or ')',
 * then a space and an uppercase letter, digit, quote or '('; not after a one-letter word or
 * e.g./i.e./etc./vs./Mr./Dr./No.). A sentence is kept when it is 24..320 bytes of printable
 * ASCII, has at least 4 words, starts with an uppercase letter, ends with its sentence mark,
 * has no markup or code characters (< > { } [ ] | \ ` = # * _ ~ ^), balanced parentheses,
 * letters for at least 60% of its non-blank characters and other symbols (not . , ' ") for at
 * most 8%, does not mention the task phrases ("pass key", "special magic",
 * "VAR "), and the same sentence was not kept before (64-bit hash). Sentences keep their order;
 * the first one of each paragraph, or after a dropped one, is marked so that generated text
 * can break lines there. */
#ifndef PULSE_SYNTH_CORPUS_H
#define PULSE_SYNTH_CORPUS_H

#include <stddef.h>

struct synth_corpus;

/* What a load found, for the log line of a generator. */
struct synth_corpus_stats {
    size_t files_seen;       /* regular files met under the paths */
    size_t files_used;       /* files that gave at least one sentence */
    size_t files_compressed; /* skipped by extension: compressed (no zlib) */
    size_t files_other;      /* skipped by extension: markup, images, code */
    size_t files_binary;     /* skipped after sniffing: NUL or control bytes, or unreadable */
    size_t bytes_read;       /* bytes read from the files used or sniffed */
    size_t sentences;        /* sentences kept */
    size_t duplicates;       /* sentences dropped because an identical one was kept */
    size_t text_bytes;       /* bytes of the sentences kept */
};

/* Loads and cleans every usable file under paths[0..n_paths) (each a directory or a file), in
 * that order, stopping once 32 MiB of sentences are kept. PULSE_OK with *out (synth_corpus_free);
 * PULSE_ERR_IO when a path cannot be opened; PULSE_ERR_INVALID when no sentence was kept
 * ("PATH: no usable plain text ..." in err); PULSE_ERR_NOMEM. *out is NULL on error. */
int synth_corpus_load(const char *const *paths, size_t n_paths, struct synth_corpus **out,
                      char *err, size_t errlen);
/* The same from text in memory (name labels messages); used by tests and callers with their
 * own documents. */
int synth_corpus_from_text(const char *name, const char *text, size_t len,
                           struct synth_corpus **out, char *err, size_t errlen);
/* Frees the corpus; NULL is a no-op. */
void synth_corpus_free(struct synth_corpus *c);

/* The default paths: /usr/share/doc and /usr/share/common-licenses (n = 2). Static storage. */
const char *const *synth_corpus_default_paths(size_t *n);

/* Number of sentences (> 0 for a loaded corpus). */
size_t synth_corpus_count(const struct synth_corpus *c);
/* Sentence i (i < count): NUL-terminated, owned by the corpus; *len its bytes, *para_start 1
 * when it begins a paragraph. */
const char *synth_corpus_sentence(const struct synth_corpus *c, size_t i, size_t *len,
                                  int *para_start);
/* Copies the load statistics. */
void synth_corpus_stats(const struct synth_corpus *c, struct synth_corpus_stats *out);

#endif
