#!/bin/bash
# usage: lab/fingerprint_configs.sh CHECKOUT OUT_DIR CORE [OMNIGLOT_DIR]
# Same-seed short runs of seven configs from CHECKOUT (with its own .venv), one
# fingerprint each (lab/run_fingerprint.py, no export): sine CAVIA and MAML, the frozen
# Omniglot configs CAVIA-proto, simVIABLE-proto and LEO on small fake features in LEO's
# layout (tests/fake_leo.py, 64-d, seeded), and the end-to-end conv CAVIA on Omniglot's
# zips (OMNIGLOT_DIR, the folder holding them, read as images; skipped without it). One thread, pinned to CORE. Compare two OUT_DIRs with
# lab/compare_fingerprints.py; a refactor must change nothing but the operative config's
# text where bindings were renamed.
set -e
TOOLS=$(dirname "$(readlink -f "$0")")
C=$(readlink -f "$1"); O=$(readlink -f -m "$2"); CORE=$3; OMNIGLOT=$4
mkdir -p "$O"
export TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 TF_CPP_MIN_LOG_LEVEL=3
cd "$C"
DATA=$(mktemp -d /tmp/fpdata.XXXX)
.venv/bin/python -c "import sys; sys.path.insert(0, '$TOOLS/../tests'); from fake_leo import write_fake_leo; write_fake_leo('$DATA', dataset='omniglot', dim=64, split_classes={'train': 12, 'val': 6, 'test': 6})"
run() {
  name=$1; shift
  D=$(mktemp -d /tmp/fprun.XXXX)
  cp -r "$DATA" "$D/data"
  taskset -c "$CORE" .venv/bin/viable-train "${@//@D@/$D}" --model_dir="$D/run" > "$O/$name.log" 2>&1
  taskset -c "$CORE" .venv/bin/python "$TOOLS/run_fingerprint.py" "$D/run" - > "$O/$name.json"
  echo "$name"
}
run sine_cavia --gin_file=gin/sine/cavia.gin --gin_param=NUM_STEPS=600
run sine_maml --gin_file=gin/sine/maml.gin --gin_param=NUM_STEPS=600
for method in cavia_proto simviable_proto leo; do
  run "omniglot_$method" --gin_file="gin/omniglot/${method}_5way1shot.gin" \
    --gin_param=NUM_STEPS=600 "--gin_param=DATA_DIR='@D@/data'"
done
if [ -n "$OMNIGLOT" ]; then
  run conv_cavia --gin_file=gin/omniglot_conv/cavia_5way1shot.gin --gin_param=NUM_STEPS=40 \
    "--gin_param=IMAGE_DIR='$(readlink -f "$OMNIGLOT")'"
fi
