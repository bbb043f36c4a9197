#!/bin/bash
# usage: lab/fingerprint_run.sh CHECKOUT OUT_JSON (the checkout with its own .venv) — a 1,250-update relVIABLE sine run, its export, its fingerprint
set -e
TOOLS=$(dirname "$(readlink -f "$0")")  # this checkout's tools, whichever checkout is measured
cd "$1"
D=$(mktemp -d /tmp/fp.XXXX)
export TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 TF_CPP_MIN_LOG_LEVEL=3
taskset -c 0 .venv/bin/viable-train --gin_file=gin/sine/relviable.gin --gin_file=gin/sine/quick.gin \
  --gin_param=NUM_STEPS=1250 --gin_param=EvaluationSpec.figure_every=500 --model_dir=$D/run > $D/train.log 2>&1
taskset -c 0 .venv/bin/viable-export --model_dir=$D/run --export_base=$D/export --model_name=sine > $D/export.log 2>&1
taskset -c 0 .venv/bin/python "$TOOLS/run_fingerprint.py" $D/run $D/export > "$2"
echo "$D"
