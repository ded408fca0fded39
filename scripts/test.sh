#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test (GPU tests run only
# where a GPU is; elsewhere ctest reports them skipped).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh" "$@"
# matplotlib for the figure scripts' test (plots/requirements.txt, from PyPI)
python3 -c "import matplotlib" >/dev/null 2>&1 ||
    python3 -m pip install --quiet -r "$root/plots/requirements.txt" >/dev/null 2>&1 ||
    echo "test.sh: matplotlib not installed; test_plots will be skipped" >&2
# the real model for the accuracy tests (they skip themselves when it cannot be installed)
"$root/scripts/setup-model.sh" >/dev/null || echo "test.sh: real model not installed; its tests will be skipped" >&2
# Qwen's BPE ranks for the tokenizer's test (it skips itself when they cannot be installed)
"$root/scripts/setup-vocab.sh" >/dev/null || echo "test.sh: qwen.tiktoken not installed; test_acc_bpe will be skipped" >&2
ctest --test-dir "${PULSE_BUILD:-$root/build}" --output-on-failure -j"$(nproc)"
