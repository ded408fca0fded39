#!/bin/bash
# anchor x hot slots x output length on the locality model (tiny, 4 x 8K, budget 1024)
cd /work/main
for out in 128 24; do for a in 0 0.25 0.5 1 2; do for h in 68 136 272 512; do
  f=/tmp/anc/o${out}_a${a}_h${h}.json
  [ -f $f ] || build/pulse run --backend cpu --model tiny --policy infinigen+solohead+gs --spec-overlap exact --workload uniform:8192:4 --output-len $out --kv-budget-gb 1 --budget-tokens 1024 --seed 1 --locality-anchor $a --hot-slots $h --out $f > /dev/null 2>&1 || echo "fail $out $a $h"
done; done; done
