#!/bin/bash
# The certified-training table (README, "Certified training"; issue 27): for each cell, the
# default certified-training command (60 epochs, compiled backend) then `torchlean certify` at
# the trained eps (clean / IBP / CROWN / alpha-CROWN / PGD 20 steps, all 359 test examples,
# bounds sound for the float32 kernels). One BLAS thread. Writes OUT/<cell>.{train,cert}.{log,json}
# and prints one row per cell; s/epoch is the training time per epoch (CPU, and wall) as
# `torchlean train` prints it.
#
# usage: benchmarks/certified_table.sh OUT [SEED] [CELLS...]
#        CELLS default: mlp:ibp:0.05 mlp:ibp:0.1 mlp:crown-ibp:0.05 mlp:crown-ibp:0.1
#                       cnn:ibp:0.05 cnn:ibp:0.1 cnn:crown-ibp:0.05 cnn:crown-ibp:0.1
set -euo pipefail
OUT=${1:?usage: certified_table.sh OUT [SEED] [CELLS...]}; SEED=${2:-0}; shift $(( $# < 2 ? $# : 2 ))
CELLS=${*:-mlp:ibp:0.05 mlp:ibp:0.1 mlp:crown-ibp:0.05 mlp:crown-ibp:0.1 cnn:ibp:0.05 cnn:ibp:0.1 cnn:crown-ibp:0.05 cnn:crown-ibp:0.1}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p "$OUT"
for cell in $CELLS; do
    IFS=: read -r model method eps <<< "$cell"
    base="$OUT/$model-$method-$eps-s$SEED"
    torchlean train --model "$model" --certified "$method" --eps "$eps" --seed "$SEED" \
        --save "$base.safetensors" --json "$base.train.json" > "$base.train.log" 2>&1
    torchlean certify --checkpoint "$base.safetensors" --json "$base.cert.json" \
        > "$base.cert.log" 2>&1
    row=$(grep -E "^ +$eps " "$base.cert.log")
    speed=$(grep "training time per epoch" "$base.train.log" | sed -E 's/.*: ([0-9.]+) s wall, ([0-9.]+) s CPU/\2 CPU (\1 wall)/')
    echo "$model $method $eps seed $SEED | clean ibp crown alpha pgd: $row | s/epoch $speed"
done
