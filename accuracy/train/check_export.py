#!/usr/bin/env python3
"""Writes a random-weight GQA test model through the trainer's own exporter (gqa_spec.py: the
same tensor names, shapes, config.json, tokenizer files and safetensors writer), without torch,
so that the directory layout can be checked where no GPU is:

  python3 accuracy/train/check_export.py /tmp/gqa-random      (needs: numpy, safetensors)
  ./build/pulse generate --model /tmp/gqa-random --prompt 'The pass key is' --backend cpu

pulse must load it (config, every tensor, the tokenizer) and generate; the weights are noise, so
the text is too. The file is also read back with the safetensors library (as transformers reads it)."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gqa_spec  # noqa: E402


def main(out_dir):
    rng = np.random.default_rng(0)
    tensors = {}
    for name, shape in gqa_spec.tensor_shapes().items():
        a = (1.0 + 0.1 * rng.standard_normal(shape)) if len(shape) == 1 else \
            0.05 * rng.standard_normal(shape)
        tensors[name] = (shape, gqa_spec.bf16_bytes(a))
    files, digest = gqa_spec.write_checkpoint(out_dir, tensors)
    from safetensors import safe_open
    with safe_open(os.path.join(out_dir, "model.safetensors"), "np") as f:
        meta, names = f.metadata(), sorted(f.keys())
    assert meta == {"format": "pt"} and names == sorted(tensors), (meta, names[:3])
    print(json.dumps({"dir": out_dir, "params": gqa_spec.param_count(), "files": files,
                      "sha256": digest}, indent=1))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
