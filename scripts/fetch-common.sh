# Sourced by the set-up scripts that fetch a checked file (setup-model.sh, setup-vocab.sh):
# they set `prog`, `want_size` and `want_sha` first.
# die MESSAGE...   the message on stderr, prefixed with $prog, and exit 1
# file_ok PATH     true when PATH is a regular file of want_size bytes and sha256 want_sha
die() { echo "$prog: $*" >&2; exit 1; }
file_ok() {
    [ -f "$1" ] && [ "$(stat -c %s "$1")" = "$want_size" ] &&
        [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$want_sha" ]
}
